"""Scale folded into the parameters first (W' = s W, b' = s b), one fp32 GEMM, then LeakyReLU as max(y, slope y)."""
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
    def __init__(self, in_features, out_features, scale, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.negative_slope = negative_slope

    def forward(self, x):
        X = _load(x)
        s = np.float32(self.scale)
        Ws = _load(self.linear.weight) * s
        bs = _load(self.linear.bias) * s
        y = X @ Ws.T + bs
        return _store(np.maximum(y, y * np.float32(self.negative_slope)), x.dtype)
