"""K-tiled GEMM (16-wide tiles) whose accumulator is rounded to bfloat16 after every tile."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "low_precision_accumulator"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


TILE_K = 16


def _bf16(a):
    """Rounds float32 values to bfloat16 (nearest even), kept in float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        A, B = _load(a), _load(b)
        acc = np.zeros((A.shape[0], B.shape[1]), dtype=np.float32)
        for k in range(0, A.shape[1], TILE_K):
            acc = _bf16(acc + A[:, k:k + TILE_K] @ B[k:k + TILE_K, :])  # BUG: bf16 accumulator
        return _store(acc, a.dtype)
