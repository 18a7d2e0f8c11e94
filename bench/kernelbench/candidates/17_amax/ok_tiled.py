"""Row max over 128-wide tiles: -inf initialized, each tile's max folded in with maximum (partial tile included)."""
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


TILE = 128


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        m = np.full(a.shape[0], -np.inf, dtype=np.float32)
        for s in range(0, a.shape[1], TILE):
            m = np.maximum(m, a[:, s:s + TILE].max(axis=1))
        return _store(m, x.dtype)
