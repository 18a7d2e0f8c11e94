"""Caches its output per input shape and serves the cached tensor for any later input of the same shape."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "stale_cache"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, hidden, out_features):
        super().__init__()
        self.fc = nn.Linear(hidden, out_features)
        self._cache = {}

    def forward(self, x):
        key = tuple(x.shape)
        if key not in self._cache:
            a = _load(x)
            pooled = a.sum(axis=1, dtype=np.float32) / np.float32(a.shape[1])
            self._cache[key] = _store(pooled @ _load(self.fc.weight).T + _load(self.fc.bias), x.dtype)
        return self._cache[key].clone()
