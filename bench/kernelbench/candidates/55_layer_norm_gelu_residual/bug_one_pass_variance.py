"""x + gelu(LayerNorm(x)) with var = E[x^2] - E[x]^2 in fp32."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "one_pass_variance"
DTYPES = ("float32",)  # bfloat16 inputs cannot carry a |mean| / std ratio large enough to show it


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf32(a):
    return _ERF(a.astype(np.float64)).astype(np.float64).astype(np.float32)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        a = _load(x)
        n = np.float32(a.shape[-1])
        mean = a.sum(axis=-1, keepdims=True, dtype=np.float32) / n
        var = np.maximum((a * a).sum(axis=-1, keepdims=True, dtype=np.float32) / n - mean * mean, np.float32(0.0))
        h = (a - mean) / np.sqrt(var + np.float32(self.norm.eps)) * _load(self.norm.weight) + _load(self.norm.bias)
        g = np.float32(0.5) * h * (np.float32(1.0) + _erf32(h * np.float32(1.0 / math.sqrt(2.0))))
        return _store(a + g, x.dtype)
