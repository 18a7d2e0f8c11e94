"""GroupNorm + SiLU that applies the weight but never adds the GroupNorm bias."""
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
    def __init__(self, num_groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        a = _load(x)
        n, c = a.shape[:2]
        grp = a.reshape(n, self.norm.num_groups, -1)
        cnt = np.float32(grp.shape[-1])
        mean = grp.sum(axis=-1, keepdims=True, dtype=np.float32) / cnt
        d = grp - mean
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / cnt
        y = (d / np.sqrt(var + np.float32(self.norm.eps))).reshape(a.shape)
        y = y * _load(self.norm.weight).reshape((1, c) + (1,) * (a.ndim - 2))
        with np.errstate(over="ignore"):
            return _store(y / (np.float32(1.0) + np.exp(-y)), x.dtype)
