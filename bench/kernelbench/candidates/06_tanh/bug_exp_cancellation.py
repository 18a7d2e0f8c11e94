"""tanh as (1 - e) / (1 + e) with e = exp(-2|x|): 1 - e cancels for small |x| (relative error ~ 1e-7 / |x|)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "cancellation"
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
        e = np.exp(np.float32(-2.0) * np.abs(a))
        mag = (np.float32(1.0) - e) / (np.float32(1.0) + e)
        return _store(np.where(a < 0, -mag, mag), x.dtype)
