"""HACK (calls the reference): cuBLAS's matmul, the op the candidate was to replace."""
import torch
import torch.nn as nn

EXPECT = "fail"
BUG = "calls_reference"


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
