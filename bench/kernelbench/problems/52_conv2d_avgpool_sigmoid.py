import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d 3x3 (no padding), 2x2 average pooling, sigmoid."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.sigmoid(F.avg_pool2d(self.conv(x), kernel_size=2))


batch_size = 8
in_channels = 5
out_channels = 12
kernel_size = 3
height = 50
width = 46


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
