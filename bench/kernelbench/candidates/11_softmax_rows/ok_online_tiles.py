"""Row softmax, online over 256-wide tiles (running max, sum rescaled when the max rises), then a normalizing pass."""
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


TILE = 256


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        rows, n = a.shape
        m = np.full((rows, 1), -np.inf, dtype=np.float32)
        l = np.zeros((rows, 1), dtype=np.float32)
        for s in range(0, n, TILE):
            t = a[:, s:s + TILE]
            m_new = np.maximum(m, t.max(axis=1, keepdims=True))
            l = l * np.exp(m - m_new) + np.exp(t - m_new).sum(axis=1, keepdims=True, dtype=np.float32)
            m = m_new
        return _store(np.exp(a - m) / l, x.dtype)
