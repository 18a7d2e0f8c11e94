"""GroupNorm with Welford statistics over 2048-element chunks, folded into a per-(sample, channel) scale and shift, then a stable SiLU."""
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


CHUNK = 2048


class ModelNew(nn.Module):
    def __init__(self, num_groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)

    def forward(self, x):
        a = _load(x)
        n, c = a.shape[:2]
        g = self.norm.num_groups
        grp = a.reshape(n, g, -1)
        count = 0
        mean = np.zeros((n, g), dtype=np.float32)
        m2 = np.zeros((n, g), dtype=np.float32)
        for s in range(0, grp.shape[-1], CHUNK):
            blk = grp[..., s:s + CHUNK]
            nb = blk.shape[-1]
            bmean = blk.sum(axis=-1, dtype=np.float32) / np.float32(nb)
            bd = blk - bmean[..., None]
            bm2 = (bd * bd).sum(axis=-1, dtype=np.float32)
            tot = count + nb
            delta = bmean - mean
            mean = mean + delta * np.float32(nb / tot)
            m2 = m2 + bm2 + delta * delta * np.float32(count * nb / tot)
            count = tot
        rstd = np.float32(1.0) / np.sqrt(m2 / np.float32(count) + np.float32(self.norm.eps))
        scale = np.repeat(rstd, c // g, axis=1) * _load(self.norm.weight)[None, :]
        shift = _load(self.norm.bias)[None, :] - np.repeat(mean, c // g, axis=1) * scale
        ext = (n, c) + (1,) * (a.ndim - 2)
        y = a * scale.reshape(ext) + shift.reshape(ext)
        e = np.exp(-np.abs(y))
        return _store(y * (np.where(y >= 0, np.float32(1.0), e) / (np.float32(1.0) + e)), x.dtype)
