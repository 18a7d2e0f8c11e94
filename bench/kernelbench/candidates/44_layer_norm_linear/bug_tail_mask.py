"""LayerNorm + Linear whose statistics loop (128-wide chunks) skips the last partial chunk (500 = 3 * 128 + 116)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "tail_mask"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


CHUNK = 128


class ModelNew(nn.Module):
    def __init__(self, hidden, out_features):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, out_features)

    def forward(self, x):
        a = _load(x)
        n = a.shape[-1]
        s1 = np.zeros(a.shape[:-1] + (1,), dtype=np.float32)
        for s in range(0, n - n % CHUNK, CHUNK):  # BUG: the 116-wide tail never reaches the mean
            s1 += a[..., s:s + CHUNK].sum(axis=-1, keepdims=True, dtype=np.float32)
        mean = s1 / np.float32(n)
        d = a - mean
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(n)
        h = d / np.sqrt(var + np.float32(self.norm.eps)) * _load(self.norm.weight) + _load(self.norm.bias)
        return _store(h @ _load(self.proj.weight).T + _load(self.proj.bias), x.dtype)
