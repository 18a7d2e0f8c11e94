"""Unfused: x + y stored in the model dtype, then LayerNorm with Welford statistics over 256-wide chunks."""
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


CHUNK = 256


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x, y):
        h = _load(_store(_load(x) + _load(y), x.dtype))
        count = 0
        mean = np.zeros(h.shape[:-1] + (1,), dtype=np.float32)
        m2 = np.zeros_like(mean)
        for s in range(0, h.shape[-1], CHUNK):
            blk = h[..., s:s + CHUNK]
            nb = blk.shape[-1]
            bmean = blk.sum(axis=-1, keepdims=True, dtype=np.float32) / np.float32(nb)
            bd = blk - bmean
            bm2 = (bd * bd).sum(axis=-1, keepdims=True, dtype=np.float32)
            tot = count + nb
            delta = bmean - mean
            mean = mean + delta * np.float32(nb / tot)
            m2 = m2 + bm2 + delta * delta * np.float32(count * nb / tot)
            count = tot
        rstd = np.float32(1.0) / np.sqrt(m2 / np.float32(count) + np.float32(self.norm.eps))
        return _store((h - mean) * rstd * _load(self.norm.weight) + _load(self.norm.bias), x.dtype)
