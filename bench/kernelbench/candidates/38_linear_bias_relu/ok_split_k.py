"""relu(x W^T + b) with split-K: three K slices reduced separately, partials summed onto the bias, then ReLU."""
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


SPLITS = 3


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))

    def forward(self, x):
        X = _load(x)
        W, b = _load(self.weight), _load(self.bias)
        K = X.shape[1]
        step = -(-K // SPLITS)
        out = np.broadcast_to(b, (X.shape[0], W.shape[0])).astype(np.float32)
        for k in range(0, K, step):
            out = out + X[:, k:k + step] @ W[:, k:k + step].T
        return _store(np.where(out > 0, out, np.float32(0.0)), x.dtype)
