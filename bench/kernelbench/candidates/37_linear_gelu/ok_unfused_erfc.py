"""Unfused: the linear output is stored in the model dtype, then GELU as 0.5 y erfc(-y / sqrt 2)."""
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
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        X = _load(x)
        W, b = _load(self.linear.weight), _load(self.linear.bias)
        y = _load(_store(X @ W.T + b, x.dtype))  # the GEMM kernel's output, read back by the GELU kernel
        return _store(np.float32(0.5) * y * _erfc32(-y * np.float32(1.0 / math.sqrt(2.0))), x.dtype)
