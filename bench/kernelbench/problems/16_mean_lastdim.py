import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean over the last dim of a 3-D tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=-1)


batch_size = 64
rows = 40
dim = 300


def get_inputs():
    return [torch.randn(batch_size, rows, dim)]


def get_init_inputs():
    return []
