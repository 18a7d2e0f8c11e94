"""BUG (accumulator kept in low precision): the K loop's accumulator declared in the input dtype
(``acc = tl.zeros(..., dtype=a.dtype.element_ty)``): each tile's fp32 dot is added and the
running sum rounded back to fp16/bf16. The error grows with K / BLOCK_K."""

import torch

from .tiles import F32, load, rnd, tiles

OP = "matmul"
DTYPES = ("float16", "bfloat16")
BUG = "low_precision_accumulator"
BLOCK_K = 32


def run(inputs):
    a, b = inputs["a"], inputs["b"]
    m, k = a.shape
    n = b.shape[1]
    acc = torch.zeros(m, n, dtype=F32)
    for s, e in tiles(k, BLOCK_K):
        acc = rnd(acc + load(a[:, s:e]) @ load(b[s:e, :]), a.dtype)  # the bug: stored in a.dtype
    return acc.to(a.dtype)
