"""Chunked fused MLP that overwrites the fc2 accumulator with each chunk's partial instead of adding it."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "accumulator_overwrite"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


CHUNK = 256


class ModelNew(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x):
        X = _load(x)
        W1, b1 = _load(self.fc1.weight), _load(self.fc1.bias)
        W2, b2 = _load(self.fc2.weight), _load(self.fc2.bias)
        c = np.float32(math.sqrt(2.0 / math.pi))
        out = np.zeros((X.shape[0], W2.shape[0]), dtype=np.float32)
        for s in range(0, W1.shape[0], CHUNK):
            h = X @ W1[s:s + CHUNK].T + b1[s:s + CHUNK]
            g = np.float32(0.5) * h * (np.float32(1.0) + np.tanh(c * (h + np.float32(0.044715) * h * h * h)))
            out = g @ W2[:, s:s + CHUNK].T  # BUG: = instead of +=
        return _store(out + b2, x.dtype)
