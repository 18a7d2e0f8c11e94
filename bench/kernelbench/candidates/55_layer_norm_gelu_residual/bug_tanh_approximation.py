"""x + gelu(LayerNorm(x)) using tanh-approximated GELU where the model uses the exact one."""
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
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        a = _load(x)
        n = np.float32(a.shape[-1])
        mean = a.sum(axis=-1, keepdims=True, dtype=np.float32) / n
        d = a - mean
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / n
        h = d / np.sqrt(var + np.float32(self.norm.eps)) * _load(self.norm.weight) + _load(self.norm.bias)
        c = np.float32(math.sqrt(2.0 / math.pi))
        g = np.float32(0.5) * h * (np.float32(1.0) + np.tanh(c * (h + np.float32(0.044715) * h * h * h)))
        return _store(a + g, x.dtype)
