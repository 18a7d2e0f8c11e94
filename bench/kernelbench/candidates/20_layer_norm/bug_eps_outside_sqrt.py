"""LayerNorm dividing by sqrt(var) + eps instead of sqrt(var + eps)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "wrong_constant"
DTYPES = ("float32",)


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        a = _load(x)
        w, b = _load(self.ln.weight), _load(self.ln.bias)
        n = np.float32(a.shape[-1])
        mean = a.sum(axis=-1, keepdims=True, dtype=np.float32) / n
        d = a - mean
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / n
        return _store(d / (np.sqrt(var) + np.float32(self.ln.eps)) * w + b, x.dtype)
