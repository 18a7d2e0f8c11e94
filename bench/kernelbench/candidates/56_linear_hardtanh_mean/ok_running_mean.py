"""GEMM + bias, min/max clamp, then a running mean over 200-feature chunks."""
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


CHUNK = 200


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = _load(x) @ _load(self.linear.weight).T + _load(self.linear.bias)
        y = np.minimum(np.maximum(y, np.float32(-1.0)), np.float32(1.0))
        mean = np.zeros(y.shape[0], dtype=np.float32)
        seen = 0
        for s in range(0, y.shape[1], CHUNK):
            blk = y[:, s:s + CHUNK]
            c = blk.shape[1]
            seen += c
            mean = mean + (blk.sum(axis=1, dtype=np.float32) - np.float32(c) * mean) / np.float32(seen)
        return _store(mean, x.dtype)
