"""Linear + GELU using the tanh approximation where the model uses exact (erf) GELU."""
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
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        X = _load(x)
        y = X @ _load(self.linear.weight).T + _load(self.linear.bias)
        c = np.float32(math.sqrt(2.0 / math.pi))
        return _store(np.float32(0.5) * y * (np.float32(1.0) + np.tanh(c * (y + np.float32(0.044715) * y * y * y))), x.dtype)
