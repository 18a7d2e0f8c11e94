"""BUG (eps in the wrong place): rms_norm computing x / (sqrt(mean(x^2)) + eps) instead of
x * rsqrt(mean(x^2) + eps). Invisible while mean(x^2) >> eps; wrong for small-magnitude rows."""

import torch

from .tiles import F32, btile, wtile, load, out_like, tiles

OP = "rms_norm"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "eps_placement"
BLOCK = 512


def run(inputs):
    x, w, eps = inputs["x"], inputs["weight"], inputs["eps"]
    r, n = x.shape
    acc = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        t = load(x[:, s:e])
        acc += (t * t).sum(dim=1)
    rstd = 1.0 / (torch.sqrt(acc / n) + eps)  # the bug
    out = out_like(x)
    for s, e in tiles(n, BLOCK):
        out[:, s:e] = (load(x[:, s:e]) * rstd[:, None] * wtile(w, s, e)).to(x.dtype)
    return out
