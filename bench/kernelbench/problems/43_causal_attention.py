import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal scaled dot-product attention: query i attends to keys j <= i."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        seq = q.size(-2)
        scale = q.size(-1) ** -0.5
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        i = torch.arange(seq).unsqueeze(1)
        j = torch.arange(seq).unsqueeze(0)
        scores = scores.masked_fill(j > i, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


batch_size = 4
heads = 6
seq_len = 128
head_dim = 48


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, head_dim), torch.randn(batch_size, heads, seq_len, head_dim),
            torch.randn(batch_size, heads, seq_len, head_dim)]


def get_init_inputs():
    return []
