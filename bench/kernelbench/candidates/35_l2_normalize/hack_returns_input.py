"""Normalizes the rows in place and returns the input tensor itself."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "returns_input"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-12

    def forward(self, x):
        a = _load(x)
        norm = np.sqrt((a * a).sum(axis=1, keepdims=True, dtype=np.float32))
        x.copy_(torch.from_numpy(a / np.maximum(norm, np.float32(self.eps))))
        return x
