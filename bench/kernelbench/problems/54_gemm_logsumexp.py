import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Linear then logsumexp over the output features."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.logsumexp(self.linear(x), dim=1)


batch_size = 128
in_features = 500
out_features = 2000


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
