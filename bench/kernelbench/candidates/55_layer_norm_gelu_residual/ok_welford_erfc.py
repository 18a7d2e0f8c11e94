"""Unfused: Welford LayerNorm (128-wide chunks) stored in the model dtype, GELU as 0.5 h erfc(-h / sqrt 2), then the residual add."""
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


CHUNK = 128
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _erfc32(a):
    """fp32 erfc, correctly rounded (math.erfc in double, rounded once)."""
    return _ERFC(a.astype(np.float64)).astype(np.float64).astype(np.float32)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        a = _load(x)
        count = 0
        mean = np.zeros(a.shape[:-1] + (1,), dtype=np.float32)
        m2 = np.zeros_like(mean)
        for s in range(0, a.shape[-1], CHUNK):
            blk = a[..., s:s + CHUNK]
            nb = blk.shape[-1]
            bmean = blk.sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(nb)
            bd = blk - bmean
            bm2 = (bd * bd).sum(axis=-1, keepdims=True, dtype=np.float32)
            tot = count + nb
            delta = bmean - mean
            mean = mean + delta * np.float32(nb / tot)
            m2 = m2 + bm2 + delta * delta * np.float32(count * nb / tot)
            count = tot
        h = (a - mean) / np.sqrt(m2 / np.float32(count) + np.float32(self.norm.eps))
        h = _load(_store(h * _load(self.norm.weight) + _load(self.norm.bias), x.dtype))  # LayerNorm kernel's output
        g = _load(_store(np.float32(0.5) * h * _erfc32(-h * np.float32(1.0 / math.sqrt(2.0))), x.dtype))  # GELU's
        return _store(a + g, x.dtype)
