import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU gate: silu(x W_gate^T) * (x W_up^T), both projections without bias."""

    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x):
        return F.silu(self.gate_proj(x)) * self.up_proj(x)


tokens = 256
hidden = 512
intermediate = 1000


def get_inputs():
    return [torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden, intermediate]
