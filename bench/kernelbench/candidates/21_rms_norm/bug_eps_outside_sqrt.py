"""RMSNorm with x / (sqrt(ms) + eps) instead of x * rsqrt(ms + eps)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "wrong_constant"
DTYPES = ("float32",)


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

    def forward(self, x):
        a = _load(x)
        w = _load(self.weight)
        ms = (a * a).sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(a.shape[-1])
        return _store(a / (np.sqrt(ms) + np.float32(self.eps)) * w, x.dtype)
