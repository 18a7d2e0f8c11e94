"""Cross-entropy with an online log-sum-exp over 256-class tiles; per-row (m - logit[t]) + log(l), then a pairwise mean."""
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

    def forward(self, logits, targets):
        z = _load(logits)
        t = targets.detach().contiguous().numpy().astype(np.int64)
        rows, n = z.shape
        m = np.full(rows, -np.inf, dtype=np.float32)
        l = np.zeros(rows, dtype=np.float32)
        for s in range(0, n, TILE):
            blk = z[:, s:s + TILE]
            m_new = np.maximum(m, blk.max(axis=1))
            l = l * np.exp(m - m_new) + np.exp(blk - m_new[:, None]).sum(axis=1, dtype=np.float32)
            m = m_new
        per_row = (m - z[np.arange(rows), t]) + np.log(l)
        return _store(np.sum(per_row, dtype=np.float32) / np.float32(rows), logits.dtype)
