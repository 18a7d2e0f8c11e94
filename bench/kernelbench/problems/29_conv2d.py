import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Conv2d 3x3, stride 1, padding 1, with bias."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)

    def forward(self, x):
        return self.conv(x)


batch_size = 8
in_channels = 4
out_channels = 16
kernel_size = 3
height = 64
width = 60


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
