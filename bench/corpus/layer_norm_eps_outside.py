"""BUG (eps in the wrong place): layer_norm normalising by 1 / (sqrt(var) + eps) instead of
rsqrt(var + eps). Indistinguishable while var >> eps; wrong for rows of tiny variance."""

import torch

from .tiles import F32, btile, wtile, load, out_like, tiles

OP = "layer_norm"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "eps_placement"
BLOCK = 256


def run(inputs):
    x, w, b, eps = inputs["x"], inputs["weight"], inputs["bias"], inputs["eps"]
    r, n = x.shape
    acc = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        acc += load(x[:, s:e]).sum(dim=1)
    mean = acc / n
    acc2 = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        acc2 += ((load(x[:, s:e]) - mean[:, None]) ** 2).sum(dim=1)
    rstd = 1.0 / (torch.sqrt(acc2 / n) + eps)  # the bug
    out = out_like(x)
    for s, e in tiles(n, BLOCK):
        y = (load(x[:, s:e]) - mean[:, None]) * rstd[:, None] * wtile(w, s, e) + btile(b, s, e)
        out[:, s:e] = y.to(x.dtype)
    return out
