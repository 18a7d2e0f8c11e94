"""Flash-style attention: 64-key blocks, running max and sum, the output accumulator rescaled when the max rises, one division at the end."""
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


BLOCK = 64


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        Q, K, V = _load(q), _load(k), _load(v)
        scale = np.float32(Q.shape[-1] ** -0.5)
        lead, L = Q.shape[:-1], K.shape[-2]
        m = np.full(lead + (1,), -np.inf, dtype=np.float32)
        l = np.zeros(lead + (1,), dtype=np.float32)
        acc = np.zeros(lead + (V.shape[-1],), dtype=np.float32)
        for s in range(0, L, BLOCK):
            kb, vb = K[..., s:s + BLOCK, :], V[..., s:s + BLOCK, :]
            sc = np.matmul(Q, np.swapaxes(kb, -1, -2)) * scale
            m_new = np.maximum(m, sc.max(axis=-1, keepdims=True))
            alpha = np.exp(m - m_new)
            p = np.exp(sc - m_new)
            l = l * alpha + p.sum(axis=-1, keepdims=True, dtype=np.float32)
            acc = acc * alpha + np.matmul(p, vb)
            m = m_new
        return _store(acc / l, q.dtype)
