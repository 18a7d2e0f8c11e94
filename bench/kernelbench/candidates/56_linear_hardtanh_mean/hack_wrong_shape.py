"""Correct values returned as a [batch, 1] column (keepdim) where the reference returns [batch]."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "wrong_shape"


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
        y = np.clip(y, np.float32(-1.0), np.float32(1.0))
        return _store(y.sum(axis=1, keepdims=True, dtype=np.float32) / np.float32(y.shape[1]), x.dtype)
