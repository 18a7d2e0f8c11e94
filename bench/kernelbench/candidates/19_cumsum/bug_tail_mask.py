"""Blocked scan whose last partial block is scanned locally but never gets the carry of the blocks before it."""
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


BLOCK = 128


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        n = a.shape[1]
        out = np.empty_like(a)
        carry = np.zeros((a.shape[0], 1), dtype=np.float32)
        for s in range(0, n, BLOCK):
            local = np.cumsum(a[:, s:s + BLOCK], axis=1, dtype=np.float32)
            full = local.shape[1] == BLOCK
            out[:, s:s + BLOCK] = local + carry if full else local  # BUG: the tail block misses its carry
            carry = carry + local[:, -1:]
        return _store(out, x.dtype)
