import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d (3x3, no padding), ReLU, then add a per-channel bias parameter."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(0.2 * torch.randn(out_channels, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


batch_size = 10
in_channels = 8
out_channels = 16
kernel_size = 3
height = 48
width = 40


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
