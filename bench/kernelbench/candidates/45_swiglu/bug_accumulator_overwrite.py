"""SwiGLU whose gate GEMM overwrites its accumulator at every K tile."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "accumulator_overwrite"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


TILE_K = 128


class ModelNew(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x):
        X = _load(x)
        Wg = _load(self.gate_proj.weight)
        g = np.zeros((X.shape[0], Wg.shape[0]), dtype=np.float32)
        for k in range(0, X.shape[1], TILE_K):
            g = X[:, k:k + TILE_K] @ Wg[:, k:k + TILE_K].T  # BUG: = instead of +=
        u = X @ _load(self.up_proj.weight).T
        with np.errstate(over="ignore"):
            return _store(g / (np.float32(1.0) + np.exp(-g)) * u, x.dtype)
