"""Correct layer_norm: Welford statistics per tile (tile mean and M2 in fp32), merged across tiles
with Chan's formula; y = (x - mean) * rsqrt(var + eps) * w + b in fp32, stored in the input dtype."""

import torch

from .tiles import F32, btile, wtile, load, out_like, tiles

OP = "layer_norm"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None
BLOCK = 256


def run(inputs):
    x, w, b, eps = inputs["x"], inputs["weight"], inputs["bias"], inputs["eps"]
    r, n = x.shape
    count = torch.zeros(r, dtype=F32)
    mean = torch.zeros(r, dtype=F32)
    m2 = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        t = load(x[:, s:e])
        c_t = float(e - s)
        mean_t = t.mean(dim=1)
        m2_t = ((t - mean_t[:, None]) ** 2).sum(dim=1)
        c_new = count + c_t
        delta = mean_t - mean
        mean = mean + delta * (c_t / c_new)
        m2 = m2 + m2_t + delta * delta * (count * c_t / c_new)
        count = c_new
    rstd = torch.rsqrt(m2 / n + eps)
    out = out_like(x)
    for s, e in tiles(n, BLOCK):
        y = (load(x[:, s:e]) - mean[:, None]) * rstd[:, None] * wtile(w, s, e) + btile(b, s, e)
        out[:, s:e] = y.to(x.dtype)
    return out
