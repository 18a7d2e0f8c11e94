import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.GroupNorm on an NCHW tensor, with affine parameters."""

    def __init__(self, num_groups, channels):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.gn.weight.copy_(1.0 + 0.3 * torch.randn(channels))
            self.gn.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x):
        return self.gn(x)


batch_size = 16
channels = 64
num_groups = 8
height = 28
width = 30


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
