"""Fused head + loss: logits produced 256 classes at a time, folded into an online log-sum-exp; the target logit by a row dot product."""
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
    def __init__(self, hidden, num_classes):
        super().__init__()
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x, targets):
        X = _load(x)
        W, b = _load(self.head.weight), _load(self.head.bias)
        t = targets.detach().contiguous().numpy().astype(np.int64)
        rows = X.shape[0]
        m = np.full(rows, -np.inf, dtype=np.float32)
        l = np.zeros(rows, dtype=np.float32)
        for c in range(0, W.shape[0], CHUNK):
            z = X @ W[c:c + CHUNK].T + b[c:c + CHUNK]
            m_new = np.maximum(m, z.max(axis=1))
            l = l * np.exp(m - m_new) + np.exp(z - m_new[:, None]).sum(axis=1, dtype=np.float32)
            m = m_new
        zt = np.einsum("ij,ij->i", X, W[t]) + b[t]
        per_row = (m - zt) + np.log(l)
        return _store(per_row.sum(dtype=np.float32) / np.float32(rows), x.dtype)
