"""Tiled sum over dim 1 (128-row tiles) that drops the last partial tile."""
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
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        acc = np.zeros((a.shape[0], a.shape[2]), dtype=np.float32)
        full = a.shape[1] // TILE
        for t in range(full):  # BUG: rows past full * TILE are never added
            acc += a[:, t * TILE:(t + 1) * TILE, :].sum(axis=1, dtype=np.float32)
        return _store(acc, x.dtype)
