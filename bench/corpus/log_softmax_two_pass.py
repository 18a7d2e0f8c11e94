"""Correct log_softmax: online max/sum over tiles, then out = (x - max) - log(sum), fp32 math,
stored in the input dtype."""

import torch

from .tiles import F32, load, out_like, rows_last, tiles

OP = "log_softmax"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None
BLOCK = 128


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
        alpha = torch.where(m == m_new, torch.ones_like(m), torch.exp(m - m_new))
        d = d * alpha + torch.exp(t - m_new[:, None]).sum(dim=1)
        m = m_new
    lse_shift = torch.log(d)
    for s, e in tiles(n, BLOCK):
        yr[:, s:e] = ((load(xr[:, s:e]) - m[:, None]) - lse_shift[:, None]).to(x.dtype)
    return out
