"""MaxPool 2x2 / stride 2 (floor): crop to even sizes, view as (.., H/2, 2, W/2, 2), max over the window axes."""
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _load(x)
        n, c, H, W = a.shape
        ho, wo = H // 2, W // 2
        v = a[:, :, :2 * ho, :2 * wo].reshape(n, c, ho, 2, wo, 2)
        return _store(v.max(axis=(3, 5)), x.dtype)
