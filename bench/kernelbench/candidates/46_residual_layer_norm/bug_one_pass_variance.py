"""Residual LayerNorm with var = E[h^2] - E[h]^2 in fp32."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "one_pass_variance"
DTYPES = ("float32",)  # bfloat16 inputs cannot carry a |mean| / std ratio large enough to show it


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
        var = np.maximum((h * h).sum(axis=-1, keepdims=True, dtype=np.float32) / n - mean * mean, np.float32(0.0))
        out = (h - mean) / np.sqrt(var + np.float32(self.norm.eps)) * _load(self.norm.weight) + _load(self.norm.bias)
        return _store(out, x.dtype)
