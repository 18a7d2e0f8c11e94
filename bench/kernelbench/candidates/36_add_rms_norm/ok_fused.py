"""Fused residual add + RMSNorm: h = x + residual kept in fp32, sum of squares over 256-wide tiles, h * rsqrt(ms + eps) * w."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "pass"
BUG = None


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


TILE = 256


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, residual):
        h = _load(x) + _load(residual)
        w = _load(self.weight)
        n = h.shape[-1]
        ss = np.zeros(h.shape[:-1] + (1,), dtype=np.float32)
        for s in range(0, n, TILE):
            t = h[..., s:s + TILE]
            ss += (t * t).sum(axis=-1, keepdims=True, dtype=np.float32)
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(n) + np.float32(self.eps))
        return _store(h * inv * w, x.dtype)
