import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Conv1d, stride 1, 'same' padding, with bias."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return self.conv(x)


batch_size = 8
in_channels = 16
out_channels = 32
kernel_size = 5
length = 1000


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
