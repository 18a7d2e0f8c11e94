"""Mean over the last dim as a running mean over 64-wide chunks: mean += (chunk_sum - c * mean) / seen."""
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
        n = a.shape[-1]
        mean = np.zeros(a.shape[:-1], dtype=np.float32)
        seen = 0
        for s in range(0, n, CHUNK):
            blk = a[..., s:s + CHUNK]
            c = blk.shape[-1]
            seen += c
            mean = mean + (blk.sum(axis=-1, dtype=np.float32) - np.float32(c) * mean) / np.float32(seen)
        return _store(mean, x.dtype)
