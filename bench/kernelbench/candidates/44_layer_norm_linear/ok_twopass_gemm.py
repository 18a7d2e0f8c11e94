"""LayerNorm (two-pass variance, fp32) written out, then the projection as a K-tiled fp32 GEMM with bias."""
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
    def __init__(self, hidden, out_features):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, out_features)

    def forward(self, x):
        a = _load(x)
        n = np.float32(a.shape[-1])
        mean = a.sum(axis=-1, keepdims=True, dtype=np.float32) / n
        d = a - mean
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / n
        h = d / np.sqrt(var + np.float32(self.norm.eps)) * _load(self.norm.weight) + _load(self.norm.bias)
        W = _load(self.proj.weight)
        h2 = h.reshape(-1, h.shape[-1])
        acc = np.zeros((h2.shape[0], W.shape[0]), dtype=np.float32)
        for k in range(0, h2.shape[1], TILE_K):
            acc += h2[:, k:k + TILE_K] @ W[:, k:k + TILE_K].T
        out = acc + _load(self.proj.bias)
        return _store(out.reshape(a.shape[:-1] + (W.shape[0],)), x.dtype)
