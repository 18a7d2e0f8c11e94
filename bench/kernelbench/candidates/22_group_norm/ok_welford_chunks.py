"""GroupNorm with Welford statistics merged over 1024-element chunks of each group, fp32 (scale and shift folded per channel)."""
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


CHUNK = 1024


class ModelNew(nn.Module):
    def __init__(self, num_groups, channels):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels, eps=1e-5)

    def forward(self, x):
        a = _load(x)
        g = self.gn.num_groups
        w, b = _load(self.gn.weight), _load(self.gn.bias)
        n, c = a.shape[:2]
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
        rstd = np.float32(1.0) / np.sqrt(m2 / np.float32(count) + np.float32(self.gn.eps))
        cpg = c // g
        scale = np.repeat(rstd, cpg, axis=1) * w[None, :]              # (n, c)
        shift = b[None, :] - np.repeat(mean, cpg, axis=1) * scale        # (n, c)
        ext = (n, c) + (1,) * (a.ndim - 2)
        return _store(a * scale.reshape(ext) + shift.reshape(ext), x.dtype)
