"""BUG (accumulator kept in low precision): sum with its per-lane accumulators declared in the
input dtype: every ``acc += tile`` rounds to fp16/bf16. Long rows lose the small terms (and fp16
overflows past 65504)."""

import torch

from .tiles import F32, load, rnd, rows_last, tiles

OP = "sum"
DTYPES = ("float16", "bfloat16")
BUG = "low_precision_accumulator"
BLOCK = 256


def run(inputs):
    x, dim, keepdim = inputs["x"], inputs["dim"], inputs["keepdim"]
    xr = rows_last(x, dim)
    r, n = xr.shape
    acc = torch.zeros(r, BLOCK, dtype=F32)
    for s, e in tiles(n, BLOCK):
        acc[:, : e - s] = rnd(acc[:, : e - s] + load(xr[:, s:e]), x.dtype)  # the bug
    out = acc.sum(dim=1).to(x.dtype)
    return out.unsqueeze(dim % 2) if keepdim else out
