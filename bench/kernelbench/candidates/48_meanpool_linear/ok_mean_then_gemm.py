"""Mean over the sequence (fp32 sum / seq_len), then a K-tiled fp32 GEMM with bias."""
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
    def __init__(self, hidden, out_features):
        super().__init__()
        self.fc = nn.Linear(hidden, out_features)

    def forward(self, x):
        a = _load(x)
        pooled = a.sum(axis=1, dtype=np.float32) / np.float32(a.shape[1])
        W = _load(self.fc.weight)
        acc = np.zeros((pooled.shape[0], W.shape[0]), dtype=np.float32)
        for k in range(0, pooled.shape[1], TILE_K):
            acc += pooled[:, k:k + TILE_K] @ W[:, k:k + TILE_K].T
        return _store(acc + _load(self.fc.bias), x.dtype)
