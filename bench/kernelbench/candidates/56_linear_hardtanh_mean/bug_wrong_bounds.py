"""GEMM + hardtanh clamped to [0, 1] (a ReLU6-style bound) instead of [-1, 1], then the mean."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "wrong_constant"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = _load(x) @ _load(self.linear.weight).T + _load(self.linear.bias)
        y = np.clip(y, np.float32(0.0), np.float32(1.0))
        return _store(y.mean(axis=1, dtype=np.float32), x.dtype)
