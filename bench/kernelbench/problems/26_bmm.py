import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matmul: C[b] = A[b] @ B[b]."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


batch_size = 16
m = 96
k = 200
n = 80


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
