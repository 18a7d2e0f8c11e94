import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.LayerNorm then nn.Linear (a pre-norm projection)."""

    def __init__(self, hidden, out_features):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, out_features)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.3 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.proj(self.norm(x))


batch_size = 64
seq_len = 20
hidden = 500
out_features = 384


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, out_features]
