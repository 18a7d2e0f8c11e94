"""BUG (tail mask leak): layer_norm after the Triton tutorial's looped kernel, which loads tiles
with ``other=0.`` and must then zero the padded lanes of ``x - mean`` before squaring
(``tl.where(cols < N, x - mean, 0.)``). Rows that fit one block (N <= 1024) take a persistent
path that has the where; the looped path for longer rows forgot it, so each padded lane adds
mean^2 to the variance. Wrong when N > 1024, N not a multiple of 1024, and the mean is not ~0."""

import torch

from .tiles import F32, btile, wtile, load, next_pow2, out_like, padded_tile, tiles

OP = "layer_norm"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "tail_mask"
BLOCK = 1024


def run(inputs):
    x, w, b, eps = inputs["x"], inputs["weight"], inputs["bias"], inputs["eps"]
    r, n = x.shape
    block = next_pow2(n) if n <= BLOCK else BLOCK
    lanes = torch.arange(block)
    acc = torch.zeros(r, dtype=F32)
    for s in range(0, n, block):
        acc += padded_tile(x, s, block, 0.0).sum(dim=1)
    mean = acc / n
    acc2 = torch.zeros(r, dtype=F32)
    for s in range(0, n, block):
        diff = padded_tile(x, s, block, 0.0) - mean[:, None]
        if n <= BLOCK:  # the persistent path masks the padded lanes
            diff = torch.where((s + lanes < n)[None, :], diff, torch.zeros_like(diff))
        acc2 += (diff * diff).sum(dim=1)  # the looped path does not: the bug
    rstd = torch.rsqrt(acc2 / n + eps)
    out = out_like(x)
    for s, e in tiles(n, block):
        y = (load(x[:, s:e]) - mean[:, None]) * rstd[:, None] * wtile(w, s, e) + btile(b, s, e)
        out[:, s:e] = y.to(x.dtype)
    return out
