"""Exact GELU as 0.5 x erfc(-x / sqrt 2) in fp32 (no cancellation for negative x)."""
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


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _erfc32(a):
    """fp32 erfc, correctly rounded (math.erfc in double, rounded once)."""
    return _ERFC(a.astype(np.float64)).astype(np.float64).astype(np.float32)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        y = np.float32(0.5) * a * _erfc32(-a * np.float32(1.0 / math.sqrt(2.0)))
        return _store(y, x.dtype)
