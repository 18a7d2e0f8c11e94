"""Batched K-tiled GEMM that overwrites the accumulator with each K tile's product."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "accumulator_overwrite"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


TILE_K = 64


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        A, B = _load(a), _load(b)
        acc = np.zeros((A.shape[0], A.shape[1], B.shape[2]), dtype=np.float32)
        for k in range(0, A.shape[2], TILE_K):
            acc = np.matmul(A[:, :, k:k + TILE_K], B[:, k:k + TILE_K, :])  # BUG: = instead of +=
        return _store(acc, a.dtype)
