import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean squared error between predictions and targets (a scalar), written out as mean((p - t)^2)
    (F.mse_loss has no bfloat16 CPU kernel in torch 1.13)."""

    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        return torch.mean((pred - target) ** 2)


batch_size = 128
dim = 4000


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
