"""GEMM of the raw rows first (64-wide K tiles), then each entry divided by its row's and column's clamped norms."""
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


TILE_K = 64


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-8

    def forward(self, a, b):
        A, B = _load(a), _load(b)
        eps = np.float32(self.eps)
        g = np.zeros((A.shape[0], B.shape[0]), dtype=np.float32)
        for k in range(0, A.shape[1], TILE_K):
            g += A[:, k:k + TILE_K] @ B[:, k:k + TILE_K].T
        na = np.maximum(np.sqrt(np.einsum("ij,ij->i", A, A)), eps)
        nb = np.maximum(np.sqrt(np.einsum("ij,ij->i", B, B)), eps)
        return _store(g / na[:, None] / nb[None, :], a.dtype)
