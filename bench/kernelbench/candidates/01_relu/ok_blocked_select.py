"""ReLU over the flattened tensor in 4096-element blocks, as a select (x <= 0 ? 0 : x)."""
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


BLOCK = 4096


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x).reshape(-1)
        out = np.empty_like(a)
        for s in range(0, a.size, BLOCK):
            blk = a[s:s + BLOCK]
            out[s:s + BLOCK] = np.where(blk <= 0, np.float32(0.0), blk)
        return _store(out.reshape(x.shape), x.dtype)
