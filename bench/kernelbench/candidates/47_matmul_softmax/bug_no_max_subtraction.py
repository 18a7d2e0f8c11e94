"""GEMM + softmax computed as exp(s) / sum(exp(s)) without the row max (overflows once scores pass ~88)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "no_max_subtraction"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        s = _load(a) @ _load(b)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(s)
            return _store(e / e.sum(axis=1, keepdims=True, dtype=np.float32), a.dtype)
