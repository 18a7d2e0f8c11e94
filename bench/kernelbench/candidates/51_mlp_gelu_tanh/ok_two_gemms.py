"""MLP: fc1 GEMM + bias, tanh-GELU in fp32, fc2 GEMM + bias (fp32 accumulation throughout)."""
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
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x):
        X = _load(x)
        h = X @ _load(self.fc1.weight).T + _load(self.fc1.bias)
        c = np.float32(math.sqrt(2.0 / math.pi))
        g = np.float32(0.5) * h * (np.float32(1.0) + np.tanh(c * (h + np.float32(0.044715) * h * h * h)))
        return _store(g @ _load(self.fc2.weight).T + _load(self.fc2.bias), x.dtype)
