"""Row argmax over 128-wide tiles: each tile's (max, first index), merged with a strict > so the earliest index wins ties."""
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
        a = a.reshape(-1, a.shape[-1])
        rows, n = a.shape
        best = np.full(rows, -np.inf, dtype=np.float32)
        idx = np.zeros(rows, dtype=np.int64)
        for s in range(0, n, TILE):
            t = a[:, s:s + TILE]
            ti = np.argmax(t, axis=1)
            tv = t[np.arange(rows), ti]
            better = tv > best
            if s == 0:
                better[:] = True
            best = np.where(better, tv, best)
            idx = np.where(better, ti + s, idx)
        return torch.from_numpy(idx.reshape(x.shape[:-1]))
