"""RMSNorm whose 128-wide sum-of-squares loop drops the last partial tile (1000 = 7 * 128 + 104)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "tail_mask"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


TILE = 128


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        a = _load(x)
        w = _load(self.weight)
        n = a.shape[-1]
        ss = np.zeros(a.shape[:-1] + (1,), dtype=np.float32)
        for s in range(0, n // TILE * TILE, TILE):  # BUG: the tail tile is not accumulated
            t = a[..., s:s + TILE]
            ss += (t * t).sum(axis=-1, keepdims=True, dtype=np.float32)
        return _store(a / np.sqrt(ss / np.float32(n) + np.float32(self.eps)) * w, x.dtype)
