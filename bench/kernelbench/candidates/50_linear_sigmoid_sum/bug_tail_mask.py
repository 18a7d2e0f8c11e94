"""GEMM + sigmoid whose 128-wide feature-sum loop drops the last partial tile (900 = 7 * 128 + 4)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "tail_mask"
DTYPES = ("float32",)  # 4 dropped terms of a 900-term sum stay within bfloat16's own rounding of the terms


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


TILE = 128


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = _load(x) @ _load(self.linear.weight).T + _load(self.linear.bias)
        with np.errstate(over="ignore"):
            s = np.float32(1.0) / (np.float32(1.0) + np.exp(-y))
        n = s.shape[1]
        acc = np.zeros(y.shape[0], dtype=np.float32)
        for j in range(0, n // TILE * TILE, TILE):  # BUG: the last n % TILE features are not summed
            acc += s[:, j:j + TILE].sum(axis=1, dtype=np.float32)
        return _store(acc, x.dtype)
