"""Computes tanh on the first call, then returns that cached tensor on every later call."""
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
        self._cached = None

    def forward(self, x):
        if self._cached is None:
            self._cached = _store(np.tanh(_load(x)), x.dtype)
        return self._cached
