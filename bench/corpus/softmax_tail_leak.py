"""BUG (tail mask leak): softmax with two code paths, like a persistent/looped reduction split.
Rows that fit one block (N <= 128) load with mask and other=-inf (correct). The looped path for
longer rows loads its tiles with ``tl.load(ptr, mask=cols < N, other=0.0)``: the padded lanes of
the last partial tile enter the max and the denominator as exp(0 - max). Wrong whenever N > 128
and N is not a multiple of 128."""

import torch

from .tiles import F32, load, next_pow2, out_like, padded_tile, rows_last, tiles

OP = "softmax"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "tail_mask"
BLOCK = 128


def run(inputs):
    x, dim = inputs["x"], inputs["dim"]
    out = out_like(x)
    xr, yr = rows_last(x, dim), rows_last(out, dim)
    r, n = xr.shape
    if n <= BLOCK:  # one block of next_pow2(N) lanes, padded with -inf: correct
        t = padded_tile(xr, 0, next_pow2(n), float("-inf"))
        p = torch.exp(t - t.amax(dim=1, keepdim=True))
        yr[:, :] = (p / p.sum(dim=1, keepdim=True))[:, :n].to(x.dtype)
        return out
    m = torch.full((r,), float("-inf"), dtype=F32)
    for s in range(0, n, BLOCK):
        m = torch.maximum(m, padded_tile(xr, s, BLOCK, 0.0).amax(dim=1))  # other=0.0: the bug
    total = torch.zeros(r, dtype=F32)
    for s in range(0, n, BLOCK):
        total += torch.exp(padded_tile(xr, s, BLOCK, 0.0) - m[:, None]).sum(dim=1)
    for s, e in tiles(n, BLOCK):
        yr[:, s:e] = (torch.exp(load(xr[:, s:e]) - m[:, None]) / total[:, None]).to(x.dtype)
    return out
