#!/usr/bin/env python3
"""First probes of the Conformance sweep's failures under PyTorch 2.x's CPU kernels.

    PYTHONPATH=. python3 evidence/conformance/probe_torch2.py        # on a machine with torch 2.x (the GPU machine)

Each probe puts a chosen input through the CPU kernel that failed in the sweep
(evidence/conformance/sweeps/sweep_cpu_torch2.md) and prints what it gives next to the exact (fp64) result of
the same rounded inputs and next to the same op upcast to fp32, so a reading can say whether the
kernel keeps something in the low dtype (a real imprecision) or gpuemu's error model has a hole.
These are probes, not verdicts: each finding goes into imprecise.py (with a per-version demo) or
into docs/error-model.md before the sweep's gate excuses or admits anything.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

torch.manual_seed(0)
print("torch", torch.__version__)


def show(name: str, got, exact: torch.Tensor, up: torch.Tensor) -> None:
    try:
        got = got() if callable(got) else got
    except RuntimeError as ex:  # no CPU kernel for this dtype in this torch
        print(f"- {name}: {str(ex).splitlines()[0]}")
        return
    g, e, u = got.double().flatten(), exact.double().flatten(), up.double().flatten()
    fin = torch.isfinite(e)
    err = (g - e).abs()[fin].max().item() if fin.any() else float("nan")
    uerr = (u - e).abs()[fin].max().item() if fin.any() else float("nan")
    print(f"- {name}: max |low - exact| {err:.3g}, max |upcast - exact| {uerr:.3g}; "
          f"non-finite where exact is finite: low {int((~torch.isfinite(g) & fin).sum())}, "
          f"upcast {int((~torch.isfinite(u) & fin).sum())}; NaN where exact is inf: "
          f"low {int((g.isnan() & e.isinf()).sum())}, upcast {int((u.isnan() & e.isinf()).sum())}")


# gelu at +-inf (every dtype failed under the special strategy: NaN where the exact result is +inf)
for dt in (torch.float32, torch.float16, torch.bfloat16):
    x = torch.tensor([float("inf"), float("-inf"), 1e30 if dt == torch.float32 else 60000.0, -3.0, 0.0]).to(dt)
    try:
        print(f"- gelu {dt}: x={x.tolist()} -> {F.gelu(x).tolist()} (tanh: {F.gelu(x, approximate='tanh').tolist()}); "
              f"fp64: {F.gelu(x.double()).tolist()}")
    except RuntimeError as ex:
        print(f"- gelu {dt}: {str(ex).splitlines()[0]}")
# the vectorized path: a long tensor, inf at an unaligned spot
x = torch.zeros(1000)
x[517] = float("inf")
print(f"- gelu float32 length 1000, inf at 517 -> {F.gelu(x)[517].item()}")

# log_softmax / logsumexp in bf16 and fp16: values close together, so x - lse is small
for dt in (torch.bfloat16, torch.float16):
    x = (torch.randn(2, 509) * 0.01 + 8).to(dt)
    x[:, 0] = 14.0
    show(f"log_softmax {dt} (row max 14, the rest near 8)", lambda: torch.log_softmax(x, -1),
         torch.log_softmax(x.double(), -1), torch.log_softmax(x.float(), -1).to(dt))
    y = (torch.randn(3, 8192) * 3).to(dt)
    show(f"logsumexp {dt} dim 0 of 3", lambda: torch.logsumexp(y, 0), torch.logsumexp(y.double(), 0),
         torch.logsumexp(y.float(), 0).to(dt))

# cross_entropy with label smoothing over 25027 classes in fp16: the smoothing term sums the
# log-probabilities of every class
for dt in (torch.float16, torch.bfloat16):
    lg = torch.randn(2, 25027).to(dt)
    t = torch.tensor([3, 7])
    show(f"cross_entropy {dt} C=25027 label_smoothing=0.1",
         lambda: F.cross_entropy(lg, t, label_smoothing=0.1, reduction="none"),
         F.cross_entropy(lg.double(), t, label_smoothing=0.1, reduction="none"),
         F.cross_entropy(lg.float(), t, label_smoothing=0.1, reduction="none").to(dt))

# bf16 GEMM with cancellation: K=7, terms of 2^10 that cancel, plus a small one
for name, fn in (("bmm", lambda a, b: torch.bmm(a, b)), ("matmul", lambda a, b: a @ b)):
    a = torch.tensor([[[1024.0, -1024.0, 1.0, 0.0, 0.0, 0.0, 0.0]]], dtype=torch.bfloat16).repeat(1, 4, 1)
    b = torch.tensor([[1.0], [1.0], [3.0517578125e-05], [0], [0], [0], [0]], dtype=torch.bfloat16)[None].repeat(1, 1, 8)
    show(f"{name} bfloat16 K=7 cancelling 1024s + 1*2^-15", fn(a, b), fn(a.double(), b.double()),
         fn(a.float(), b.float()).to(torch.bfloat16))
    a = (torch.randn(11, 771, 7) * torch.tensor([1e4, 1, 1e-4, 1e4, 1, 1e-4, 1])).to(torch.bfloat16)
    b = torch.randn(11, 7, 512).to(torch.bfloat16)
    show(f"{name} bfloat16 11x771x7x512, columns of 1e4/1/1e-4", fn(a, b), fn(a.double(), b.double()),
         fn(a.float(), b.float()).to(torch.bfloat16))
# GEMM with -inf: is a NaN produced from padding (inf * 0)?
a = torch.randn(496, 129).to(torch.bfloat16)
a[5, 3] = float("-inf")
b = torch.rand(129, 384).to(torch.bfloat16) + 0.5
show("matmul bfloat16 496x129x384, one -inf in a, b > 0", a @ b, a.double() @ b.double(), (a.float() @ b.float()).bfloat16())
a2 = a.t().contiguous().t()
show("matmul bfloat16, the same with a column-major", a2 @ b, a.double() @ b.double(), (a.float() @ b.float()).bfloat16())

# batch_norm eval in fp16/bf16: an offset mean, so x*alpha + beta cancels
for dt in (torch.float16, torch.bfloat16):
    x = (torch.randn(51, 5, 2051) * 0.5 + 300).to(dt)
    rm = torch.full((5,), 300.0).to(dt)
    rv = torch.full((5,), 0.25).to(dt)
    w = torch.ones(5).to(dt)
    b = torch.zeros(5).to(dt)
    show(f"batch_norm eval {dt}, mean 300, std 0.5",
         lambda: F.batch_norm(x, rm, rv, w, b, False, 0.0, 1e-5),
         F.batch_norm(x.double(), rm.double(), rv.double(), w.double(), b.double(), False, 0.0, 1e-5),
         F.batch_norm(x.float(), rm.float(), rv.float(), w.float(), b.float(), False, 0.0, 1e-5).to(dt))

# l2norm (F.normalize) in fp16 along a long dim: a sum of squares in fp16?
for dt in (torch.float16, torch.float32):
    x = (torch.randn(3266, 38)).to(dt)
    show(f"normalize {dt} dim 0 (3266 long)", lambda: F.normalize(x, dim=0), F.normalize(x.double(), dim=0),
         F.normalize(x.float(), dim=0).to(dt))
