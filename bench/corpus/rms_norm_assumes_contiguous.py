"""BUG (contiguity assumption): rms_norm whose wrapper passes ``x.view(-1)``-style flat memory
(``x_ptr + row * N + cols``): right for contiguous x, wrong rows and columns for a transposed,
stepped or expanded view."""

import torch

from .tiles import F32, btile, wtile, flat_rows, load, out_like, tiles

OP = "rms_norm"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "stride_assumption"
BLOCK = 512


def run(inputs):
    x, w, eps = inputs["x"], inputs["weight"], inputs["eps"]
    xf = flat_rows(x)  # the bug: strides ignored
    r, n = xf.shape
    acc = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        t = load(xf[:, s:e])
        acc += (t * t).sum(dim=1)
    rstd = torch.rsqrt(acc / n + eps)
    out = out_like(x)
    for s, e in tiles(n, BLOCK):
        out[:, s:e] = (load(xf[:, s:e]) * rstd[:, None] * wtile(w, s, e)).to(x.dtype)
    return out
