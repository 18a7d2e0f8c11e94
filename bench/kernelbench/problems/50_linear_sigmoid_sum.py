import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Linear, sigmoid, then a sum over the features."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.sigmoid(self.linear(x)).sum(dim=1)


batch_size = 128
in_features = 600
out_features = 900


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
