import torch
import torch.nn as nn


class Model(nn.Module):
    """2-D max pooling, 2x2 window, stride 2."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return self.pool(x)


batch_size = 16
channels = 24
height = 48
width = 50


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
