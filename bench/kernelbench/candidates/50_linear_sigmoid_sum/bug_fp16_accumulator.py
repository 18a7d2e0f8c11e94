"""GEMM + sigmoid whose feature sum runs in a float16 accumulator (rounded after every term)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "low_precision_accumulator"
DTYPES = ("float32",)  # an fp16 running sum stays within bfloat16's own rounding of the 900 terms


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = _load(x) @ _load(self.linear.weight).T + _load(self.linear.bias)
        with np.errstate(over="ignore"):
            s = np.float32(1.0) / (np.float32(1.0) + np.exp(-y))
        acc = np.zeros(y.shape[0], dtype=np.float16)
        for j in range(s.shape[1]):
            acc = (acc.astype(np.float32) + s[:, j]).astype(np.float16)  # BUG: fp16 accumulator
        return _store(acc.astype(np.float32), x.dtype)
