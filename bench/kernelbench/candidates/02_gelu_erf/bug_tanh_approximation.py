"""GELU with the tanh approximation where the problem asks for the exact (erf) form (off by up to ~5e-4)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "wrong_approximation"
DTYPES = ("float32",)


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        c = np.float32(math.sqrt(2.0 / math.pi))
        y = np.float32(0.5) * a * (np.float32(1.0) + np.tanh(c * (a + np.float32(0.044715) * a * a * a)))
        return _store(y, x.dtype)
