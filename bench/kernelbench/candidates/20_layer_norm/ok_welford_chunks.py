"""LayerNorm with Welford statistics merged over 128-wide chunks (Chan's parallel update), fp32."""
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


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x):
        a = _load(x)
        w, b = _load(self.ln.weight), _load(self.ln.bias)
        shape = a.shape[:-1] + (1,)
        count = 0
        mean = np.zeros(shape, dtype=np.float32)
        m2 = np.zeros(shape, dtype=np.float32)
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
        var = m2 / np.float32(count)
        rstd = np.float32(1.0) / np.sqrt(var + np.float32(self.ln.eps))
        return _store((a - mean) * rstd * w + b, x.dtype)
