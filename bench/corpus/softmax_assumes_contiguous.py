"""BUG (contiguity assumption): a softmax kernel launched with ``x_ptr + row * N + cols`` (no
stride arguments): it reads the memory after ``x.data_ptr()`` as a contiguous [R, N] matrix.
Right for contiguous inputs; on a transposed, stepped or expanded view it reads other elements."""

import torch

from .tiles import F32, flat_rows, load, out_like, rows_last, tiles

OP = "softmax"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "stride_assumption"
BLOCK = 128


def run(inputs):
    x, dim = inputs["x"], inputs["dim"]
    out = out_like(x)
    xr = flat_rows(rows_last(x, dim))  # the bug: strides ignored
    yr = rows_last(out, dim)
    r, n = xr.shape
    m = torch.full((r,), float("-inf"), dtype=F32)
    for s, e in tiles(n, BLOCK):
        m = torch.maximum(m, load(xr[:, s:e]).amax(dim=1))
    total = torch.zeros(r, dtype=F32)
    for s, e in tiles(n, BLOCK):
        total += torch.exp(load(xr[:, s:e]) - m[:, None]).sum(dim=1)
    for s, e in tiles(n, BLOCK):
        yr[:, s:e] = (torch.exp(load(xr[:, s:e]) - m[:, None]) / total[:, None]).to(x.dtype)
    return out
