import torch
import torch.nn as nn


class Model(nn.Module):
    """Logistic sigmoid, elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)


batch_size = 200
dim = 3500


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
