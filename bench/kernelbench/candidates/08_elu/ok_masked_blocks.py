"""ELU over flat blocks of 8192: copies the block, then rewrites only its non-positive lanes with alpha * expm1(x)."""
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


BLOCK = 8192


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        a = _load(x).reshape(-1)
        out = np.empty_like(a)
        alpha = np.float32(self.alpha)
        for s in range(0, a.size, BLOCK):
            blk = a[s:s + BLOCK]
            o = blk.copy()
            neg = ~(blk > 0)
            o[neg] = alpha * np.expm1(blk[neg])
            out[s:s + BLOCK] = o
        return _store(out.reshape(x.shape), x.dtype)
