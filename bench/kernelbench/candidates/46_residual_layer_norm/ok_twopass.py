"""LayerNorm(x + y): the sum kept in fp32, two-pass variance, affine."""
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
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x, y):
        h = _load(x) + _load(y)
        n = np.float32(h.shape[-1])
        mean = h.sum(axis=-1, keepdims=True, dtype=np.float32) / n
        d = h - mean
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / n
        out = d / np.sqrt(var + np.float32(self.norm.eps)) * _load(self.norm.weight) + _load(self.norm.bias)
        return _store(out, x.dtype)
