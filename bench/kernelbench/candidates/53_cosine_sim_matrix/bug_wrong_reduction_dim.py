"""Cosine-similarity matrix that normalizes the columns of a and b (norms over dim 0) instead of their rows."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "wrong_reduction_dim"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-8

    def forward(self, a, b):
        A, B = _load(a), _load(b)
        eps = np.float32(self.eps)
        an = A / np.maximum(np.sqrt((A * A).sum(axis=0, keepdims=True, dtype=np.float32)), eps)
        bn = B / np.maximum(np.sqrt((B * B).sum(axis=0, keepdims=True, dtype=np.float32)), eps)
        return _store(an @ bn.T, a.dtype)
