"""Causal mask off by one: keys j >= i masked (j < i kept), so a query never sees itself and row 0 is all -inf (NaN)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "mask_bug"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        Q, K, V = _load(q), _load(k), _load(v)
        L = Q.shape[-2]
        s = np.matmul(Q, np.swapaxes(K, -1, -2)) * np.float32(Q.shape[-1] ** -0.5)
        masked = np.arange(L)[None, :] >= np.arange(L)[:, None]  # BUG: should be >
        s = np.where(masked, np.float32(-np.inf), s)
        with np.errstate(invalid="ignore"):
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p = p / p.sum(axis=-1, keepdims=True, dtype=np.float32)
        return _store(np.matmul(p, V), q.dtype)
