import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for A (m, k) and B (k, n)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


m = 256
k = 1000
n = 384


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
