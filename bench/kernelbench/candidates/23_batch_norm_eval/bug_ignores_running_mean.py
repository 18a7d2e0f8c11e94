"""Inference batch norm that never subtracts running_mean."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "ignores_parameter"


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
        shp = (1, -1) + (1,) * (a.ndim - 2)
        rv = _load(self.running_var).reshape(shp)
        w, b = _load(self.weight).reshape(shp), _load(self.bias).reshape(shp)
        return _store(a / np.sqrt(rv + np.float32(self.eps)) * w + b, x.dtype)
