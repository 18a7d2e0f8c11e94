"""Inference batch norm folded per channel: scale = weight / sqrt(var + eps), shift = bias - mean * scale; y = x * scale + shift."""
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
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        self.eps = 1e-5

    def forward(self, x):
        a = _load(x)
        scale = _load(self.weight) / np.sqrt(_load(self.running_var) + np.float32(self.eps))
        shift = _load(self.bias) - _load(self.running_mean) * scale
        shp = (1, -1) + (1,) * (a.ndim - 2)
        return _store(a * scale.reshape(shp) + shift.reshape(shp), x.dtype)
