import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over the middle dim of a 3-D tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1)


batch_size = 32
reduce_dim = 1200
inner = 24


def get_inputs():
    return [torch.randn(batch_size, reduce_dim, inner)]


def get_init_inputs():
    return []
