import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """nn.Linear, multiply by a scale, then LeakyReLU with the given slope."""

    def __init__(self, in_features, out_features, scale, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(self.linear(x) * self.scale, negative_slope=self.negative_slope)


batch_size = 128
in_features = 1000
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 1.5, 0.1]
