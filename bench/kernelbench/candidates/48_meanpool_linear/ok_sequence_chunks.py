"""Mean pooling as running sums over 32-token chunks, scaled by 1/seq_len, then x W^T + b with a pre-transposed weight."""
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


CHUNK = 32


class ModelNew(nn.Module):
    def __init__(self, hidden, out_features):
        super().__init__()
        self.fc = nn.Linear(hidden, out_features)

    def forward(self, x):
        a = _load(x)
        acc = np.zeros((a.shape[0], a.shape[2]), dtype=np.float32)
        for s in range(0, a.shape[1], CHUNK):
            acc += a[:, s:s + CHUNK, :].sum(axis=1, dtype=np.float32)
        pooled = acc * np.float32(1.0 / a.shape[1])
        Wt = np.ascontiguousarray(_load(self.fc.weight).T)
        return _store(pooled @ Wt + _load(self.fc.bias), x.dtype)
