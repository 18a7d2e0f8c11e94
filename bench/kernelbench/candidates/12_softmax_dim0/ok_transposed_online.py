"""Softmax over dim 0 as a row softmax of the transpose, online over 128-row tiles, transposed back."""
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
        t = np.ascontiguousarray(_load(x).T)  # (cols, rows): one softmax per row now
        r, n = t.shape
        m = np.full((r, 1), -np.inf, dtype=np.float32)
        l = np.zeros((r, 1), dtype=np.float32)
        for s in range(0, n, TILE):
            blk = t[:, s:s + TILE]
            m_new = np.maximum(m, blk.max(axis=1, keepdims=True))
            l = l * np.exp(m - m_new) + np.exp(blk - m_new).sum(axis=1, keepdims=True, dtype=np.float32)
            m = m_new
        return _store(np.ascontiguousarray((np.exp(t - m) / l).T), x.dtype)
