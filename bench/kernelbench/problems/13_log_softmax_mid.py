import torch
import torch.nn as nn


class Model(nn.Module):
    """Log-softmax over the middle dim of a 3-D tensor (channels of a sequence)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=1)


batch_size = 16
channels = 300
length = 96


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
