"""Mean over the last dim: fp32 sums over 128-wide tiles, one division by n at the end."""
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
        n = a.shape[-1]
        acc = np.zeros(a.shape[:-1], dtype=np.float32)
        for s in range(0, n, TILE):
            acc += a[..., s:s + TILE].sum(axis=-1, dtype=np.float32)
        return _store(acc / np.float32(n), x.dtype)
