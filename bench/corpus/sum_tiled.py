"""Correct sum: per-lane fp32 accumulators over BLOCK-wide tiles (``acc += tl.load(...)``), reduced
across lanes at the end, stored in the input dtype. Handles dim and keepdim."""

import torch

from .tiles import F32, load, rows_last, tiles

OP = "sum"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None
BLOCK = 256


def run(inputs):
    x, dim, keepdim = inputs["x"], inputs["dim"], inputs["keepdim"]
    xr = rows_last(x, dim)
    r, n = xr.shape
    acc = torch.zeros(r, BLOCK, dtype=F32)
    for s, e in tiles(n, BLOCK):
        acc[:, : e - s] += load(xr[:, s:e])
    out = acc.sum(dim=1).to(x.dtype)
    return out.unsqueeze(dim % 2) if keepdim else out
