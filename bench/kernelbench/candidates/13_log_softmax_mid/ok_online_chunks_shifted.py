"""Log-softmax over dim 1, online over 64-channel chunks, with the epilogue (x - max) - log(sum) as PyTorch's kernels order it."""
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


CHUNK = 64


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        b, c, n = a.shape
        m = np.full((b, 1, n), -np.inf, dtype=np.float32)
        l = np.zeros((b, 1, n), dtype=np.float32)
        for s in range(0, c, CHUNK):
            blk = a[:, s:s + CHUNK, :]
            m_new = np.maximum(m, blk.max(axis=1, keepdims=True))
            l = l * np.exp(m - m_new) + np.exp(blk - m_new).sum(axis=1, keepdims=True, dtype=np.float32)
            m = m_new
        return _store((a - m) - np.log(l), x.dtype)
