"""BUG (accumulator overwrite): a blocked scan whose carry is overwritten with the current tile's
own total (``carry = tl.sum(x)`` instead of ``carry += tl.sum(x)``): from the third tile on,
every prefix misses all but the previous tile."""

import torch

from .tiles import F32, load, out_like, rows_last, tiles

OP = "cumsum"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "accumulator_overwrite"
BLOCK = 256


def run(inputs):
    x, dim = inputs["x"], inputs["dim"]
    out = out_like(x)
    xr, yr = rows_last(x, dim), rows_last(out, dim)
    r, n = xr.shape
    carry = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        t = load(xr[:, s:e])
        yr[:, s:e] = (torch.cumsum(t, dim=1) + carry[:, None]).to(x.dtype)
        carry = t.sum(dim=1)  # the bug
    return out
