import torch
import torch.nn as nn


class Model(nn.Module):
    """L2-normalize each row: x / max(||x||_2, eps), written out."""

    def __init__(self):
        super().__init__()
        self.eps = 1e-12

    def forward(self, x):
        norm = torch.sqrt((x * x).sum(dim=1, keepdim=True))
        return x / torch.clamp(norm, min=self.eps)


batch_size = 256
dim = 2000


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
