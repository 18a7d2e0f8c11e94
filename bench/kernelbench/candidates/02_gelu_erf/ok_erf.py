"""Exact GELU as 0.5 x (1 + erf(x / sqrt 2)) in fp32, with a correctly rounded fp32 erf."""
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


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf32(a):
    """fp32 erf, correctly rounded (math.erf in double, rounded once): what a good erff gives."""
    return _ERF(a.astype(np.float64)).astype(np.float64).astype(np.float32)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        y = np.float32(0.5) * a * (np.float32(1.0) + _erf32(a * np.float32(1.0 / math.sqrt(2.0))))
        return _store(y, x.dtype)
