import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Transformer MLP: fc2(gelu_tanh(fc1(x)))."""

    def __init__(self, hidden, intermediate):
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


batch_size = 128
hidden = 384
intermediate = 1536


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden, intermediate]
