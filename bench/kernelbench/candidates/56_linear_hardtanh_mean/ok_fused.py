"""GEMM + bias (128-wide K tiles), clip to [-1, 1], fp32 row sum / out_features."""
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


TILE_K = 128


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        X = _load(x)
        W = _load(self.linear.weight)
        acc = np.zeros((X.shape[0], W.shape[0]), dtype=np.float32)
        for k in range(0, X.shape[1], TILE_K):
            acc += X[:, k:k + TILE_K] @ W[:, k:k + TILE_K].T
        y = np.clip(acc + _load(self.linear.bias), np.float32(-1.0), np.float32(1.0))
        return _store(y.sum(axis=1, dtype=np.float32) / np.float32(y.shape[1]), x.dtype)
