"""Sum over dim 1 in 128-row tiles: an fp32 sum per tile added into an fp32 accumulator."""
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
        acc = np.zeros((a.shape[0], a.shape[2]), dtype=np.float32)
        for s in range(0, a.shape[1], TILE):
            acc += a[:, s:s + TILE, :].sum(axis=1, dtype=np.float32)
        return _store(acc, x.dtype)
