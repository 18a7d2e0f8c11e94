"""Linear with the accumulator initialized to the bias, a pre-transposed W^T and 300-wide K tiles, fp32."""
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


TILE_K = 300


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        X = _load(x)
        Wt = np.ascontiguousarray(_load(self.linear.weight).T)
        acc = np.repeat(_load(self.linear.bias)[None, :], X.shape[0], axis=0)
        for k in range(0, X.shape[1], TILE_K):
            acc += X[:, k:k + TILE_K] @ Wt[k:k + TILE_K, :]
        return _store(acc, x.dtype)
