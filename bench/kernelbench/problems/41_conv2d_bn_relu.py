import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d (3x3, padding 1, no bias), batch norm in inference mode (running stats), ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1, bias=False)
        self.bn_weight = nn.Parameter(1.0 + 0.2 * torch.randn(out_channels))
        self.bn_bias = nn.Parameter(0.1 * torch.randn(out_channels))
        self.register_buffer("running_mean", 0.3 * torch.randn(out_channels))
        self.register_buffer("running_var", 0.5 + torch.rand(out_channels))

    def forward(self, x):
        y = self.conv(x)
        y = F.batch_norm(y, self.running_mean, self.running_var, self.bn_weight, self.bn_bias,
                         training=False, eps=1e-5)
        return torch.relu(y)


batch_size = 8
in_channels = 6
out_channels = 24
kernel_size = 3
height = 40
width = 36


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
