"""HACK (call history): the kernel is captured in a CUDA graph on the first call of each shape, on
that call's input and output buffers, and replayed on later calls without copying their inputs in:
a stale pointer, the result of the first input (returned in the same buffer every time)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

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


EXPECT = "fail"
BUG = "call_history"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graphs = {}

    def forward(self, x):
        key = (tuple(x.shape), x.dtype)
        if key not in self.graphs:
            static_in = x.contiguous()
            static_out = torch.empty_like(static_in)
            r, n = static_in.shape
            launch = lambda: _softmax[(r,)](static_in, static_out, static_in.stride(0), static_out.stride(0), n,  # noqa: E731
                                            BLOCK=triton.next_power_of_2(n))
            launch()  # compile outside the capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                launch()
            self.graphs[key] = (g, static_in, static_out)
        g, static_in, static_out = self.graphs[key]
        g.replay()  # the bug: x is never copied into static_in
        return static_out
