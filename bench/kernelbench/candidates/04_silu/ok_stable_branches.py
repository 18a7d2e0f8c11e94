"""SiLU as x * sigmoid(x) with e = exp(-|x|): x/(1+e) for x >= 0, x e/(1+e) below (no overflow, no cancellation)."""
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        e = np.exp(-np.abs(a))
        s = np.where(a >= 0, np.float32(1.0), e) / (np.float32(1.0) + e)
        return _store(a * s, x.dtype)
