"""Softplus via max(bx, 0) + log1p(exp(-|bx|)), divided by beta; x itself above the threshold (fp32)."""
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
    def __init__(self, beta, threshold):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x):
        a = _load(x)
        beta = np.float32(self.beta)
        bx = a * beta
        soft = (np.maximum(bx, np.float32(0.0)) + np.log1p(np.exp(-np.abs(bx)))) / beta
        return _store(np.where(bx > np.float32(self.threshold), a, soft), x.dtype)
