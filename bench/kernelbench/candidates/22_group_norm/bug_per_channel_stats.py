"""Normalizes each channel on its own (instance-norm statistics) instead of each group of channels."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "wrong_reduction_dim"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, num_groups, channels):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels, eps=1e-5)

    def forward(self, x):
        a = _load(x)
        w, b = _load(self.gn.weight), _load(self.gn.bias)
        n, c = a.shape[:2]
        ch = a.reshape(n, c, -1)  # BUG: statistics over one channel, not over the group
        cnt = np.float32(ch.shape[-1])
        mean = ch.sum(axis=-1, keepdims=True, dtype=np.float32) / cnt
        d = ch - mean
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / cnt
        y = (d / np.sqrt(var + np.float32(self.gn.eps))).reshape(a.shape)
        bshape = (1, c) + (1,) * (a.ndim - 2)
        return _store(y * w.reshape(bshape) + b.reshape(bshape), x.dtype)
