"""Fused GEMM + logsumexp: 256 output features at a time, folded into an online (max, sum) state without storing the GEMM output."""
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
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        X = _load(x)
        W, b = _load(self.linear.weight), _load(self.linear.bias)
        m = np.full(X.shape[0], -np.inf, dtype=np.float32)
        l = np.zeros(X.shape[0], dtype=np.float32)
        for c in range(0, W.shape[0], CHUNK):
            y = X @ W[c:c + CHUNK].T + b[c:c + CHUNK]
            m_new = np.maximum(m, y.max(axis=1))
            l = l * np.exp(m - m_new) + np.exp(y - m_new[:, None]).sum(axis=1, dtype=np.float32)
            m = m_new
        return _store(m + np.log(l), x.dtype)
