"""Sum pooling where the model mean-pools (no division by seq_len), then the linear layer."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "missing_scale"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, hidden, out_features):
        super().__init__()
        self.fc = nn.Linear(hidden, out_features)

    def forward(self, x):
        pooled = _load(x).sum(axis=1, dtype=np.float32)
        return _store(pooled @ _load(self.fc.weight).T + _load(self.fc.bias), x.dtype)
