#!/usr/bin/env python3
"""What torch's CPU softmax and log_softmax backward kernels compute (torch 1.13 on this machine).

1. bfloat16: emulations of where the kernel may round, compared bit for bit with its output on random
   rows (64 x 584, logits of standard deviation 2). The one that rounds the row sum (sum g * y for
   softmax, sum g for log_softmax) once to bfloat16, all else in fp32, matches every element.
2. An output y in another layout than grad_out's: torch._softmax_backward_data returns wrong values
   (the formula y * (g - sum(g * y)) computed by torch itself on the same tensors, and the kernel on
   y.contiguous(), agree with each other, not with it). Autograd never passes such a y (softmax's
   saved output is contiguous), so the Conformance sweep calls it as autograd does
   (bench/conformance/impls.py) and tests/python/test_backward.py keeps the raw call failing.
3. silu and gelu backward in bfloat16: silu's and gelu's tanh form round every intermediate to
   bfloat16; gelu's erf form is the fp32 kernel on the upcast inputs where x and grad_out are both
   contiguous, and rounds every intermediate to bfloat16 where x is in another layout (its scalar
   path). gelu's erf form (fp32, bf16) on
   a transposed grad_out against a contiguous x returns wrong values (garbage, NaN); on
   grad_out.contiguous(), or with both transposed, it is right. The Conformance sweep passes
   grad_out contiguous and tests/python/test_backward.py keeps the raw call failing.

    PYTHONPATH=. .venv/bin/python evidence/conformance/probe_backward_bf16.py > evidence/conformance/probe_backward_bf16.txt
"""

from __future__ import annotations

import math

import torch

torch.manual_seed(1)
torch.set_num_threads(1)
B = torch.bfloat16
print(f"torch {torch.__version__}")


def r(t: torch.Tensor) -> torch.Tensor:
    return t.to(B).float()


def show(title: str, got: torch.Tensor, cands: dict) -> None:
    print(title)
    for name, v in cands.items():
        print(f"  {name:38s} bit for bit on {(r(v) == got).float().mean().item():7.2%} of {got.numel()} elements")


y = torch.softmax(torch.randn(64, 584) * 2, -1).to(B)
g = torch.randn(64, 584).to(B)
yf, gf = y.float(), g.float()
s = (gf * yf).sum(-1, keepdim=True)
show("softmax backward, bfloat16 (torch._softmax_backward_data):", torch._softmax_backward_data(g, y, -1, B).float(), {
    "fp32 throughout, rounded once": yf * (gf - s),
    "the row sum s rounded to bf16": yf * (gf - r(s)),
    "the products g*y rounded to bf16": yf * (gf - r(gf * yf).sum(-1, keepdim=True)),
    "g - s rounded to bf16": yf * r(gf - s),
    "y*g - y*s, each rounded to bf16": r(r(yf * gf) - r(yf * s)),
})
y = torch.log_softmax(torch.randn(64, 584) * 2, -1).to(B)
g = torch.randn(64, 584).to(B)
yf, gf = y.float(), g.float()
S = gf.sum(-1, keepdim=True)
show("log_softmax backward, bfloat16 (torch._log_softmax_backward_data):",
     torch._log_softmax_backward_data(g, y, -1, B).float(), {
         "fp32 throughout, rounded once": gf - torch.exp(yf) * S,
         "the row sum S rounded to bf16": gf - torch.exp(yf) * r(S),
         "exp(y) rounded to bf16": gf - r(torch.exp(yf)) * S,
         "exp(y) * S rounded to bf16": gf - r(torch.exp(yf) * S),
     })

print("softmax backward, float32, y in another layout than grad_out:")
for what, y32 in (("y transposed (a [7, 5] softmax, viewed [5, 7])", torch.softmax(torch.randn(7, 5), 0).t()),
                  ("y strided (every other column of [5, 14])", torch.softmax(torch.randn(5, 14), -1)[:, ::2])):
    g32 = torch.randn(5, 7)
    formula = y32 * (g32 - (g32 * y32).sum(-1, keepdim=True))
    raw = torch._softmax_backward_data(g32, y32, -1, torch.float32)
    ctg = torch._softmax_backward_data(g32, y32.contiguous(), -1, torch.float32)
    print(f"  {what}: |raw - formula| max {(raw - formula).abs().max().item():.3g}, "
          f"|kernel on y.contiguous() - formula| max {(ctg - formula).abs().max().item():.3g}")
gT = torch.randn(7, 5).t()
y32 = torch.softmax(torch.randn(5, 7), -1)
print(f"  grad_out transposed, y contiguous: |raw - formula| max "
      f"{(torch._softmax_backward_data(gT, y32, -1, torch.float32) - y32 * (gT - (gT * y32).sum(-1, keepdim=True))).abs().max().item():.3g}")
lyT = torch.log_softmax(torch.randn(7, 5), 0).t()
g32 = torch.randn(5, 7)
print(f"  log_softmax backward, y transposed: |raw - formula| max "
      f"{(torch._log_softmax_backward_data(g32, lyT, -1, torch.float32) - (g32 - torch.exp(lyT) * g32.sum(-1, keepdim=True))).abs().max().item():.3g}")

print("silu backward, bfloat16 (torch.ops.aten.silu_backward; swiglu's autograd calls it):")
xs = (torch.randn(4096) * 4).to(B)
gs = torch.randn(4096).to(B)
xf_, gf_ = xs.float(), gs.float()
sig = r(1 / r(1 + r(torch.exp(-xf_))))
show("  (torch.ops.aten.silu_backward):", torch.ops.aten.silu_backward(gs, xs).float(), {
    "fp32 throughout, rounded once": gf_ * torch.sigmoid(xf_) * (1 + xf_ * (1 - torch.sigmoid(xf_))),
    "sigmoid held in bf16, the rest fp32": gf_ * r(torch.sigmoid(xf_)) * (1 + xf_ * (1 - r(torch.sigmoid(xf_)))),
    "every intermediate rounded to bf16": r(r(gf_ * sig) * r(1 + r(xf_ * r(1 - sig)))),
})
ups = torch.randn(4096).to(B)
gate = xs.clone().requires_grad_(True)
upt = ups.clone().requires_grad_(True)
(torch.nn.functional.silu(gate) * upt).backward(gs)
same = (torch.ops.aten.silu_backward(gs * ups, xs) == gate.grad).float().mean().item()
print(f"  swiglu's autograd grad_gate equals silu_backward(grad_out * up in bf16, gate) on {same:.2%} of 4096 elements")

print("gelu backward, bfloat16 (torch.ops.aten.gelu_backward, F.gelu's autograd backward):")
xg = (torch.randn(4096) * 3).to(B)
gg = torch.randn(4096).to(B)
xgf, ggf = xg.float(), gg.float()


def c(v: float) -> torch.Tensor:
    return r(torch.tensor(v))


kb, kk = c(math.sqrt(2.0 / math.pi)), c(0.044715)
xsq = r(xgf * xgf)
t = r(torch.tanh(r(kb * r(xgf + r(kk * r(xsq * xgf))))))
tanh_bf16 = r(ggf * r(r(0.5 * r(1 + t)) + r(r(r(0.5 * xgf) * r(1 - r(t * t))) * r(kb * r(1 + r(r(3 * kk) * xsq))))))
show("  tanh form:", torch.ops.aten.gelu_backward(gg, xg, approximate="tanh").float(), {
    "fp32 throughout, rounded once": torch.ops.aten.gelu_backward(ggf, xgf, approximate="tanh"),
    "every intermediate rounded to bf16": tanh_bf16,
})
show("  erf form:", torch.ops.aten.gelu_backward(gg, xg).float(), {
    "fp32 kernel on the upcast inputs, rounded once": torch.ops.aten.gelu_backward(ggf, xgf),
})


def erf_bf16(gf: torch.Tensor, xf: torch.Tensor) -> torch.Tensor:
    cdf = r(c(0.5) * r(1 + r(torch.erf(r(xf * c(math.sqrt(0.5)))))))
    pdf = r(c(1 / math.sqrt(2 * math.pi)) * r(torch.exp(r(r(xf * xf) * c(-0.5)))))
    return r(gf * r(cdf + r(xf * pdf)))


xgt = (torch.randn(64, 64) * 3).to(B).t()
ggt = torch.randn(64, 64).to(B)
show("  erf form, x transposed against a contiguous grad_out (its scalar path):",
     torch.ops.aten.gelu_backward(ggt, xgt).float(), {
         "fp32 kernel on the upcast inputs, rounded once": torch.ops.aten.gelu_backward(ggt.float(), xgt.float()),
         "every intermediate rounded to bf16": erf_bf16(ggt.float(), xgt.float()),
     })
print("gelu backward, a grad_out in another layout than x's ([32, 24], |raw - float64| max):")
for dt in (torch.float32, B):
    for approx in ("none", "tanh"):
        xl = torch.randn(32, 24).to(dt)
        gt = torch.randn(24, 32).to(dt).t()
        want = torch.ops.aten.gelu_backward(gt.double(), xl.double(), approximate=approx)
        raw = (torch.ops.aten.gelu_backward(gt, xl, approximate=approx).double() - want).abs().max().item()
        fixed = (torch.ops.aten.gelu_backward(gt.contiguous(), xl, approximate=approx).double() - want).abs().max().item()
        xt = torch.randn(24, 32).to(dt).t()
        both = (torch.ops.aten.gelu_backward(gt, xt, approximate=approx).double() -
                torch.ops.aten.gelu_backward(gt.double(), xt.double(), approximate=approx)).abs().max().item()
        print(f"  {str(dt)[6:]:8s} {approx:4s}: grad_out transposed, x contiguous {raw:.3g}; "
              f"grad_out.contiguous() {fixed:.3g}; both transposed {both:.3g}")
