"""SiLU as 0.5 x (1 + tanh(x / 2)): 1 + tanh cancels for negative x, losing every digit of x * sigmoid(x) there."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "cancellation"


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
        return _store(np.float32(0.5) * a * (np.float32(1.0) + np.tanh(np.float32(0.5) * a)), x.dtype)
