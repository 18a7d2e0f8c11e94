"""SwiGLU with the gate and up projections swapped: silu(x W_up^T) * (x W_gate^T)."""
import math

import numpy as np
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "swapped_operands"


def _load(t):
    """A tensor as a float32 numpy array (a copy: the kernel never writes its inputs)."""
    return np.array(t.detach().float().contiguous().numpy(), dtype=np.float32)


def _store(a, dtype):
    """A float32 result as a tensor of the model's dtype (one rounding for bfloat16)."""
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(dtype)


class ModelNew(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x):
        X = _load(x)
        g = X @ _load(self.up_proj.weight).T     # BUG: the up weights feed the gate
        u = X @ _load(self.gate_proj.weight).T
        with np.errstate(over="ignore"):
            return _store(g / (np.float32(1.0) + np.exp(-g)) * u, x.dtype)
