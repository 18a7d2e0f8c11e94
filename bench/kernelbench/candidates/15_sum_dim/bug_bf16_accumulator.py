"""Sum over dim 1 with a bfloat16 running sum (rounded to bf16 after every addition)."""
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


def _bf16(a):
    """Rounds float32 values to bfloat16 (nearest even), kept in float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        acc = np.zeros((a.shape[0], a.shape[2]), dtype=np.float32)
        for r in range(a.shape[1]):
            acc = _bf16(acc + a[:, r, :])  # BUG: the accumulator lives in bf16
        return _store(acc, x.dtype)
