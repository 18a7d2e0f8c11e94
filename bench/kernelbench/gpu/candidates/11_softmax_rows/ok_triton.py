"""Correct: a Triton softmax, one program per row, the row in one block (masked, -inf padding),
fp32 math, the output stored in the input dtype."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

EXPECT = "pass"
BUG = None


@triton.jit
def _softmax(x_ptr, y_ptr, stride_x, stride_y, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + cols, (e / s).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        r, n = x.shape
        _softmax[(r,)](x, y, x.stride(0), y.stride(0), n, BLOCK=triton.next_power_of_2(n))
        return y
