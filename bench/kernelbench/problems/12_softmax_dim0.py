import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over dim 0 (down each column)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=0)


rows = 1500
cols = 300


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
