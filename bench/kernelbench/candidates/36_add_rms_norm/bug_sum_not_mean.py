"""Add + RMSNorm using the sum of squares where the mean of squares belongs (never divides by dim)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "missing_scale"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, residual):
        h = _load(x) + _load(residual)
        ss = (h * h).sum(axis=-1, keepdims=True, dtype=np.float32)
        return _store(h / np.sqrt(ss + np.float32(self.eps)) * _load(self.weight), x.dtype)
