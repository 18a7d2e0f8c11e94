import torch
import torch.nn as nn


class Model(nn.Module):
    """GEMM with explicit weight and bias parameters, then ReLU: relu(x @ W^T + b)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features ** 0.5)
        self.bias = nn.Parameter(0.5 * torch.randn(out_features))

    def forward(self, x):
        return torch.relu(torch.matmul(x, self.weight.t()) + self.bias)


batch_size = 256
in_features = 700
out_features = 600


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
