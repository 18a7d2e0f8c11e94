"""Returns zeros of the output's shape (computed from the sizes only) without doing any work."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "zeros_output"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        k = self.conv.kernel_size[0]
        n, _, H, W = x.shape
        return torch.zeros(n, self.conv.out_channels, (H - k + 1) // 2, (W - k + 1) // 2, dtype=x.dtype)
