"""Sum over dim 1 as a pairwise tree: pad the reduced dim to a power of two with zeros, add halves until one row is left."""
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        b, r, i = a.shape
        p = 1
        while p < r:
            p *= 2
        buf = np.zeros((b, p, i), dtype=np.float32)
        buf[:, :r, :] = a
        while buf.shape[1] > 1:
            h = buf.shape[1] // 2
            buf = buf[:, :h, :] + buf[:, h:, :]
        return _store(buf[:, 0, :], x.dtype)
