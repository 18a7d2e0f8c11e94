"""BUG (low-precision accumulator): the same kernel with the row's running sum of squares kept in
bfloat16 between tiles."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def _add_rms(x_ptr, r_ptr, w_ptr, y_ptr, n, eps, BLOCK: tl.constexpr, BF16_ACC: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    if BF16_ACC:
        total = tl.zeros([1], dtype=tl.bfloat16)
    for s in range(0, n, BLOCK):
        cols = s + tl.arange(0, BLOCK)
        mask = cols < n
        h = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32) + \
            tl.load(r_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        if BF16_ACC:
            total = (total.to(tl.float32) + tl.sum(h * h, axis=0)).to(tl.bfloat16)
        else:
            acc += h * h
    if BF16_ACC:
        ms = tl.sum(total.to(tl.float32), axis=0) / n
    else:
        ms = tl.sum(acc, axis=0) / n
    rstd = 1.0 / tl.sqrt(ms + eps)
    for s in range(0, n, BLOCK):
        cols = s + tl.arange(0, BLOCK)
        mask = cols < n
        h = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32) + \
            tl.load(r_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def launch(x, residual, weight, eps, bf16_acc=False):
    x, residual = x.contiguous(), residual.contiguous()
    y = torch.empty_like(x)
    r, n = x.shape
    _add_rms[(r,)](x, residual, weight.contiguous(), y, n, eps, BLOCK=256, BF16_ACC=bf16_acc)
    return y


EXPECT = "fail"
BUG = "low_precision_accumulator"
# In bfloat16 this bug is no bug at this problem's shape: dim is fixed at 1200 by the weight, five
# 256-wide tiles, so the total is rounded five times, and the output lands within 2.03 u_bf16 |ref|
# where the problem's own Model run in bfloat16 reaches 4.02 (evidence/kernelbench/cuda.md,
# evidence/kernelbench/bf16_accumulator.py). It is expected to fail in float32 (1,408 over).
DTYPES = ["float32"]


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, residual):
        return launch(x, residual, self.weight, self.eps, bf16_acc=True)
