"""LayerNorm's affine folded into the projection (W' = W diag(gamma), b' = W beta + b); Welford stats over 128-wide chunks; x_hat @ W'^T + b'."""
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
    def __init__(self, hidden, out_features):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, out_features)

    def forward(self, x):
        a = _load(x)
        rows = a.reshape(-1, a.shape[-1])
        count = 0
        mean = np.zeros((rows.shape[0], 1), dtype=np.float32)
        m2 = np.zeros((rows.shape[0], 1), dtype=np.float32)
        for s in range(0, rows.shape[1], CHUNK):
            blk = rows[:, s:s + CHUNK]
            nb = blk.shape[1]
            bmean = blk.sum(axis=1, keepdims=True, dtype=np.float32) / np.float32(nb)
            bd = blk - bmean
            bm2 = (bd * bd).sum(axis=1, keepdims=True, dtype=np.float32)
            tot = count + nb
            delta = bmean - mean
            mean = mean + delta * np.float32(nb / tot)
            m2 = m2 + bm2 + delta * delta * np.float32(count * nb / tot)
            count = tot
        xhat = (rows - mean) / np.sqrt(m2 / np.float32(count) + np.float32(self.norm.eps))
        W = _load(self.proj.weight)
        Wf = W * _load(self.norm.weight)[None, :]
        bf = W @ _load(self.norm.bias) + _load(self.proj.bias)
        out = xhat @ Wf.T + bf
        return _store(out.reshape(a.shape[:-1] + (W.shape[0],)), x.dtype)
