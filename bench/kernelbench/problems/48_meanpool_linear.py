import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean over the sequence dim, then nn.Linear."""

    def __init__(self, hidden, out_features):
        super().__init__()
        self.fc = nn.Linear(hidden, out_features)

    def forward(self, x):
        return self.fc(x.mean(dim=1))


batch_size = 32
seq_len = 100
hidden = 256
out_features = 640


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, out_features]
