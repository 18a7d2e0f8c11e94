import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Batch norm in inference mode: (x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel."""

    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(features))
        self.bias = nn.Parameter(0.1 * torch.randn(features))
        self.register_buffer("running_mean", 0.5 * torch.randn(features))
        self.register_buffer("running_var", 0.5 + torch.rand(features))
        self.eps = 1e-5

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=False, eps=self.eps)


batch_size = 32
features = 96
height = 20
width = 17


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [features]
