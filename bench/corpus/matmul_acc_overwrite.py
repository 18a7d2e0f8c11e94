"""BUG (accumulator overwrite): ``acc = tl.dot(a, b)`` instead of ``acc += tl.dot(a, b)`` in the
K loop: only the last K tile survives. Right while K <= BLOCK_K."""

import torch

from .tiles import F32, load, tiles

OP = "matmul"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "accumulator_overwrite"
BLOCK_K = 32


def run(inputs):
    a, b = inputs["a"], inputs["b"]
    m, k = a.shape
    n = b.shape[1]
    acc = torch.zeros(m, n, dtype=F32)
    for s, e in tiles(k, BLOCK_K):
        acc = load(a[:, s:e]) @ load(b[s:e, :])  # the bug
    return acc.to(a.dtype)
