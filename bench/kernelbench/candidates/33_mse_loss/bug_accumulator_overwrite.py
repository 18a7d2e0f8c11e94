"""Tiled MSE that keeps only the last tile's sum of squares (acc = ... instead of acc += ...)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "accumulator_overwrite"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


TILE = 4096


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        d = (_load(pred) - _load(target)).reshape(-1)
        acc = np.float32(0.0)
        for s in range(0, d.size, TILE):
            t = d[s:s + TILE]
            acc = np.float32(np.dot(t, t))  # BUG: overwrites the running sum
        return _store(acc / np.float32(d.size), pred.dtype)
