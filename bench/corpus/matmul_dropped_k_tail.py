"""BUG (dropped tail block): the K loop runs ``for k in range(0, K // BLOCK_K)`` with unmasked
loads, so the last partial K tile never contributes. Right when K is a multiple of BLOCK_K."""

import torch

from .tiles import F32, load

OP = "matmul"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "dropped_tail"
BLOCK_K = 32


def run(inputs):
    a, b = inputs["a"], inputs["b"]
    m, k = a.shape
    n = b.shape[1]
    acc = torch.zeros(m, n, dtype=F32)
    for i in range(k // BLOCK_K):  # the bug: the partial tile is skipped
        s = i * BLOCK_K
        acc += load(a[:, s : s + BLOCK_K]) @ load(b[s : s + BLOCK_K, :])
    return acc.to(a.dtype)
