import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ELU with a given alpha: x for x > 0, alpha * (exp(x) - 1) otherwise."""

    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, alpha=self.alpha)


batch_size = 96
dim = 4000


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.7]
