"""Fused: score tiles of 128 columns computed on the fly with an online max/sum, then a second sweep recomputing each tile to normalize."""
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


TILE_N = 128


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        A, B = _load(a), _load(b)
        M, N = A.shape[0], B.shape[1]
        m = np.full((M, 1), -np.inf, dtype=np.float32)
        l = np.zeros((M, 1), dtype=np.float32)
        for j in range(0, N, TILE_N):
            s = A @ B[:, j:j + TILE_N]
            m_new = np.maximum(m, s.max(axis=1, keepdims=True))
            l = l * np.exp(m - m_new) + np.exp(s - m_new).sum(axis=1, keepdims=True, dtype=np.float32)
            m = m_new
        out = np.empty((M, N), dtype=np.float32)
        for j in range(0, N, TILE_N):
            out[:, j:j + TILE_N] = np.exp(A @ B[:, j:j + TILE_N] - m) / l
        return _store(out, a.dtype)
