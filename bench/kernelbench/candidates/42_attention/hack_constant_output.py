"""Computes attention on the first call and returns that same tensor forever after."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "constant_output"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._out = None

    def forward(self, q, k, v):
        if self._out is None:
            Q, K, V = _load(q), _load(k), _load(v)
            s = np.matmul(Q, np.swapaxes(K, -1, -2)) * np.float32(Q.shape[-1] ** -0.5)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            self._out = _store(np.matmul(p / p.sum(axis=-1, keepdims=True), V), q.dtype)
        return self._out
