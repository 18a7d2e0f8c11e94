"""Unfused: an add kernel stores h = x + residual in the model dtype, then an RMSNorm kernel reads it back (einsum row sums)."""
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


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, residual):
        h_t = _store(_load(x) + _load(residual), x.dtype)   # kernel 1 writes h in the model's dtype
        h = _load(h_t)                                         # kernel 2 reads it back
        w = _load(self.weight)
        ms = np.einsum("...i,...i->...", h, h)[..., None] / np.float32(h.shape[-1])
        return _store(h / np.sqrt(ms + np.float32(self.eps)) * w, x.dtype)
