import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """GroupNorm then SiLU (a diffusion-UNet block's norm + activation)."""

    def __init__(self, num_groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.3 * torch.randn(channels))
            self.norm.bias.copy_(0.2 * torch.randn(channels))

    def forward(self, x):
        return F.silu(self.norm(x))


batch_size = 8
channels = 32
num_groups = 4
height = 40
width = 36


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
