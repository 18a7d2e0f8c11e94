"""MaxPool reading the input storage as a contiguous NCHW array whatever its strides."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "stride_assumption"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


def _raw(t):
    """BUG: reads the tensor's storage row-major from its offset, as if it were contiguous, whatever its
    strides (past the end of a short storage, e.g. an expanded tensor's, it wraps around instead of faulting)."""
    n = t.numel()
    avail = max(1, min(n, t.storage().size() - t.storage_offset()))
    flat = torch.as_strided(t.detach(), (avail,), (1,), t.storage_offset()).float().numpy()
    return np.resize(flat, n).reshape(tuple(t.shape))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a = _raw(x)
        n, c, H, W = a.shape
        ho, wo = H // 2, W // 2
        return _store(a[:, :, :2 * ho, :2 * wo].reshape(n, c, ho, 2, wo, 2).max(axis=(3, 5)), x.dtype)
