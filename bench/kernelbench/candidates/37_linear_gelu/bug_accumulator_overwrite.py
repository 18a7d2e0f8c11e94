"""Linear + GELU whose K-tile loop overwrites the accumulator instead of adding to it."""
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
_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf32(a):
    return _ERF(a.astype(np.float64)).astype(np.float64).astype(np.float32)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        X = _load(x)
        W, b = _load(self.linear.weight), _load(self.linear.bias)
        acc = np.zeros((X.shape[0], W.shape[0]), dtype=np.float32)
        for k in range(0, X.shape[1], TILE_K):
            acc = X[:, k:k + TILE_K] @ W[:, k:k + TILE_K].T  # BUG: = instead of +=
        y = acc + b
        return _store(np.float32(0.5) * y * (np.float32(1.0) + _erf32(y * np.float32(1.0 / math.sqrt(2.0)))), x.dtype)
