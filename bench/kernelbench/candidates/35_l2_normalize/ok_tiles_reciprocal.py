"""Row L2 normalization: sum of squares over 512-wide tiles, then x times the reciprocal of max(sqrt(sum), eps)."""
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


TILE = 512


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-12

    def forward(self, x):
        a = _load(x)
        ss = np.zeros((a.shape[0], 1), dtype=np.float32)
        for s in range(0, a.shape[1], TILE):
            t = a[:, s:s + TILE]
            ss += (t * t).sum(axis=1, keepdims=True, dtype=np.float32)
        inv = np.float32(1.0) / np.maximum(np.sqrt(ss), np.float32(self.eps))
        return _store(a * inv, x.dtype)
