"""relu(x W^T + b) that reads x's storage as a contiguous (batch, in) array whatever its strides."""
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
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))

    def forward(self, x):
        X = _raw(x)
        return _store(np.maximum(X @ _load(self.weight).T + _load(self.bias), np.float32(0.0)), x.dtype)
