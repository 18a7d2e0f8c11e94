"""GroupNorm with var = E[x^2] - E[x]^2 in fp32."""
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
        self.gn = nn.GroupNorm(num_groups, channels, eps=1e-5)

    def forward(self, x):
        a = _load(x)
        g = self.gn.num_groups
        w, b = _load(self.gn.weight), _load(self.gn.bias)
        n, c = a.shape[:2]
        grp = a.reshape(n, g, -1)
        cnt = np.float32(grp.shape[-1])
        mean = grp.sum(axis=-1, keepdims=True, dtype=np.float32) / cnt
        var = np.maximum((grp * grp).sum(axis=-1, keepdims=True, dtype=np.float32) / cnt - mean * mean, 0)
        y = ((grp - mean) / np.sqrt(var + np.float32(self.gn.eps))).reshape(a.shape)
        bshape = (1, c) + (1,) * (a.ndim - 2)
        return _store(y * w.reshape(bshape) + b.reshape(bshape), x.dtype)
