"""softmax(A @ B): one fp32 GEMM (128-wide K tiles), then a two-pass row softmax."""
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


TILE_K = 128


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        A, B = _load(a), _load(b)
        s = np.zeros((A.shape[0], B.shape[1]), dtype=np.float32)
        for k in range(0, A.shape[1], TILE_K):
            s += A[:, k:k + TILE_K] @ B[k:k + TILE_K, :]
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return _store(e / e.sum(axis=1, keepdims=True, dtype=np.float32), a.dtype)
