import torch
import torch.nn as nn


class Model(nn.Module):
    """Maximum over dim 1."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=1)


batch_size = 256
dim = 2000


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
