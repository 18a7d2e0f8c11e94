"""GEMM + logsumexp without the linear layer's bias."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "dropped_bias"
DTYPES = ("float32",)  # the bias moves the logsumexp by less than a bfloat16 ulp of it


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
        y = _load(x) @ _load(self.linear.weight).T
        m = y.max(axis=1)
        return _store(m + np.log(np.exp(y - m[:, None]).sum(axis=1, dtype=np.float32)), x.dtype)
