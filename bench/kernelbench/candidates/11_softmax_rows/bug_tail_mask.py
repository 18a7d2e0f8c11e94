"""Two-pass softmax whose sum loop over 128-wide tiles stops before the last partial tile."""
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
        n = a.shape[1]
        m = a.max(axis=1, keepdims=True)
        e = np.exp(a - m)
        s = np.zeros((a.shape[0], 1), dtype=np.float32)
        for k in range(0, n - TILE + 1, TILE):  # BUG: the tail (n % TILE columns) is never summed
            s += e[:, k:k + TILE].sum(axis=1, keepdims=True, dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            return _store(e / s, x.dtype)
