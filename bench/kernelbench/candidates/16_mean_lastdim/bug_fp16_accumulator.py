"""Mean over the last dim with a float16 running sum (each partial sum rounded to fp16), then divided by n."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "low_precision_accumulator"


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
        n = a.shape[-1]
        acc = np.zeros(a.shape[:-1], dtype=np.float16)
        with np.errstate(over="ignore", invalid="ignore"):
            for k in range(n):
                acc = (acc.astype(np.float32) + a[..., k]).astype(np.float16)  # BUG: fp16 accumulator
        return _store(acc.astype(np.float32) / np.float32(n), x.dtype)
