"""GroupNorm + SiLU with var = E[x^2] - E[x]^2 in fp32."""
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
    def __init__(self, num_groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        a = _load(x)
        n, c = a.shape[:2]
        grp = a.reshape(n, self.norm.num_groups, -1)
        cnt = np.float32(grp.shape[-1])
        mean = grp.sum(axis=-1, keepdims=True, dtype=np.float32) / cnt
        var = np.maximum((grp * grp).sum(axis=-1, keepdims=True, dtype=np.float32) / cnt - mean * mean, np.float32(0.0))
        y = ((grp - mean) / np.sqrt(var + np.float32(self.norm.eps))).reshape(a.shape)
        shp = (1, c) + (1,) * (a.ndim - 2)
        y = y * _load(self.norm.weight).reshape(shp) + _load(self.norm.bias).reshape(shp)
        with np.errstate(over="ignore"):
            return _store(y / (np.float32(1.0) + np.exp(-y)), x.dtype)
