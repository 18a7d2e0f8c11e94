"""Correct softmax, online (one-pass max and sum with rescaling, Milakov & Gimelshein), then a
normalisation pass: m_new = max(m, tile max); d = d * exp(m - m_new) + sum exp(x - m_new)."""

import torch

from .tiles import F32, load, out_like, rows_last, tiles

OP = "softmax"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None
BLOCK = 256


def run(inputs):
    x, dim = inputs["x"], inputs["dim"]
    out = out_like(x)
    xr, yr = rows_last(x, dim), rows_last(out, dim)
    r, n = xr.shape
    m = torch.full((r,), float("-inf"), dtype=F32)
    d = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        t = load(xr[:, s:e])
        m_new = torch.maximum(m, t.amax(dim=1))
        # exp(-inf - (-inf)) is NaN: a row that is still all -inf keeps d = 0 (Triton: tl.where)
        alpha = torch.where(m == m_new, torch.ones_like(m), torch.exp(m - m_new))
        d = d * alpha + torch.exp(t - m_new[:, None]).sum(dim=1)
        m = m_new
    for s, e in tiles(n, BLOCK):
        yr[:, s:e] = (torch.exp(load(xr[:, s:e]) - m[:, None]) / d[:, None]).to(x.dtype)
    return out
