"""Gradients judged end to end on a GPU (issue 20): ``fuzz_op_client_side(op, run_op, backward=True,
device=...)`` with differentiable torch kernels, correct and buggy, as a training team would pass
them: the forward is judged, then ``<op>_backward``'s cases go through the kernel's autograd and
every input gradient is judged.

    python3 -m bench.gpu.backward_client [--device cuda] [--cases 100] [--seed 1] [--markdown OUT]

The correct kernels must pass (forward and gradients); each buggy one must be caught in its
gradients. Ops whose backward is not in this catalogue (or that backward=True refuses) are
reported as such, not skipped silently. Exit status 1 when a correct kernel fails or a bug is
missed. evidence/gpu/backward.md records the runs on the H200.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F

from gpuemu import Client, errors


class SiluSigmoidOnly(torch.autograd.Function):
    """SiLU whose backward forgets x·s·(1 − s) (the sigmoid_only bug class)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)


class MatmulGradBUntransposed(torch.autograd.Function):
    """a @ b whose backward computes grad_b = grad_out^T @ a reshaped, not a^T @ grad_out: a layout bug
    that only square shapes hide."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g @ b.transpose(-1, -2), (g.transpose(-1, -2) @ a).reshape(b.shape)


class SwigluGradGateWithoutUp(torch.autograd.Function):
    """silu(gate) * up whose grad_gate forgets the factor up."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, g):
        gate, up = ctx.saved_tensors
        s = torch.sigmoid(gate)
        return g * s * (1 + gate * (1 - s)), g * F.silu(gate)


class GeluNoPdfTerm(torch.autograd.Function):
    """Exact (erf) GELU whose backward is g·Φ(x), without the x·φ(x) term."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 0.5 * (1 + torch.erf(x * 0.7071067811865476))


class LayerNormNoProjection(torch.autograd.Function):
    """layer_norm whose grad_x drops the projection term −x̂·mean(w·g·x̂)."""

    @staticmethod
    def forward(ctx, x, w, b, eps):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + eps)
        ctx.save_for_backward(x, w, mean, rstd)
        return ((xf - mean) * rstd * w.float() + b.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, w, mean, rstd = ctx.saved_tensors
        xh = (x.float() - mean) * rstd
        wg = w.float() * g.float()
        gx = rstd * (wg - wg.mean(-1, keepdim=True))
        return (gx.to(x.dtype), (g.float() * xh).sum(0).to(w.dtype), g.float().sum(0).to(w.dtype), None)


class CrossEntropyMeanOverAllRows(torch.autograd.Function):
    """cross_entropy ('mean') whose backward divides by every row, ignored ones counted."""

    @staticmethod
    def forward(ctx, x, t, ignore_index, smoothing):
        ctx.save_for_backward(x, t)
        ctx.ignore_index, ctx.smoothing = ignore_index, smoothing
        return F.cross_entropy(x, t, ignore_index=ignore_index, label_smoothing=smoothing)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        keep = t != ctx.ignore_index
        s, C = ctx.smoothing, x.shape[-1]
        q = torch.full_like(x, s / C, dtype=torch.float32)
        rows = keep.nonzero()[:, 0]
        q[rows, t[rows]] += 1.0 - s
        k = g.float() / x.shape[0]
        return (k * (torch.softmax(x.float(), -1) - q) * keep[:, None]).to(x.dtype), None, None, None


class SoftmaxNoRowSum(torch.autograd.Function):
    """softmax whose backward forgets − Σ g·y: grad_x = y·g."""

    @staticmethod
    def forward(ctx, x, dim):
        y = torch.softmax(x.float(), dim).to(x.dtype)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return (y.float() * g.float()).to(y.dtype), None


class LogSoftmaxWithSoftmaxBackward(torch.autograd.Function):
    """log_softmax whose backward is softmax's formula p·(g − Σ g·p) instead of g − p·Σ g."""

    @staticmethod
    def forward(ctx, x, dim):
        ctx.dim = dim
        out = torch.log_softmax(x.float(), dim)
        ctx.save_for_backward(out)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        p, gf = out.exp(), g.float()
        return (p * (gf - (gf * p).sum(ctx.dim, keepdim=True))).to(g.dtype), None


def _attention_fp32(q, k, v, causal, scale):
    d = q.shape[-1]
    s = 1.0 / d ** 0.5 if scale is None else scale
    h, hkv = q.shape[-3], k.shape[-3]
    q, k, v = q.float(), k.float(), v.float()
    if h != hkv:
        k, v = k.repeat_interleave(h // hkv, dim=-3), v.repeat_interleave(h // hkv, dim=-3)
    sc = (q @ k.transpose(-1, -2)) * s
    if causal:
        m = torch.ones(sc.shape[-2], sc.shape[-1], dtype=torch.bool, device=sc.device).tril()
        sc = sc.masked_fill(~m, float("-inf"))
    return torch.softmax(sc, -1) @ v  # top-left causal: every row attends key 0


class AttentionDqWithoutScale(torch.autograd.Function):
    """attention whose dq forgets the score scale (dq = dS·K, not scale·dS·K); dk and dv correct."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.scale = causal, scale
        return _attention_fp32(q, k, v, causal, scale).to(q.dtype)

    @staticmethod
    def backward(ctx, g):
        q, k, v = ctx.saved_tensors
        d = q.shape[-1]
        s = 1.0 / d ** 0.5 if ctx.scale is None else ctx.scale
        with torch.enable_grad():
            leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
            out = _attention_fp32(*leaves, ctx.causal, ctx.scale)
            dq, dk, dv = torch.autograd.grad(out, leaves, g.float())
        return (dq / s).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def sdpa(i: Dict[str, Any]) -> torch.Tensor:
    """F.scaled_dot_product_attention (torch 2: its backend's choice for the dtype and device), on
    16-byte-aligned copies of q, k, v and of the gradient that reaches it: its flash and efficient
    backends crash on an operand at a storage offset of one element, forward and backward ("CUDA
    error: misaligned address", which breaks the process's CUDA context; listed: evidence/gpu/sdpa.md), and
    ``.contiguous()`` keeps such an operand where it is, so the wrapper a user needs clones."""
    h, hkv = i["q"].shape[-3], i["k"].shape[-3]
    q, k, v = (i[n].clone() for n in ("q", "k", "v"))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(i.get("causal")), scale=i.get("scale"),
                                         enable_gqa=h != hkv)
    if out.requires_grad:
        out.register_hook(lambda g: g.clone())
    return out


def cross_entropy(i: Dict[str, Any], x: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x, i["target"], ignore_index=i.get("ignore_index", -100),
                           reduction=i.get("reduction", "mean"), label_smoothing=i.get("label_smoothing", 0.0))


def upcast(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The kernel in fp32 on half inputs, the result cast back: autograd flows through both casts."""

    def run(*xs: torch.Tensor, **kw: Any) -> torch.Tensor:
        dt = xs[0].dtype
        return fn(*(x.float() for x in xs), **kw).to(dt)

    return run


Kernel = Tuple[str, str, Callable[[Dict[str, Any]], Any], bool, List[str]]  # op, label, run_op, correct, dtypes
HALF = ["float16", "bfloat16"]


def kernels() -> List[Kernel]:
    silu32 = lambda i: F.silu(i["x"])  # noqa: E731
    return [
        ("silu", "F.silu", silu32, True, ["float32"]),
        ("silu", "F.silu in fp32, cast back", lambda i: upcast(F.silu)(i["x"]), True, HALF),
        ("silu", "SiLU with a sigmoid-only backward", lambda i: SiluSigmoidOnly.apply(i["x"]), False, ["float32"]),
        ("swiglu", "F.silu(gate) * up", lambda i: F.silu(i["gate"]) * i["up"], True, ["float32"]),
        ("swiglu", "F.silu(gate) * up in fp32, cast back",
         lambda i: upcast(lambda g, u: F.silu(g) * u)(i["gate"], i["up"]), True, HALF),
        ("swiglu", "swiglu whose grad_gate forgets up", lambda i: SwigluGradGateWithoutUp.apply(i["gate"], i["up"]),
         False, ["float32"]),
        ("gelu", "F.gelu", lambda i: F.gelu(i["x"], approximate=i.get("approximate", "none")), True, ["float32"]),
        ("gelu", "F.gelu in fp32, cast back",
         lambda i: upcast(lambda x: F.gelu(x, approximate=i.get("approximate", "none")))(i["x"]), True, HALF),
        ("gelu", "GELU whose backward drops x·φ(x)", lambda i: GeluNoPdfTerm.apply(i["x"]), False, ["float32"]),
        ("matmul", "a @ b", lambda i: i["a"] @ i["b"], True, ["float32"]),
        ("matmul", "a @ b in fp32, cast back", lambda i: upcast(lambda a, b: a @ b)(i["a"], i["b"]), True, HALF),
        ("matmul", "a @ b with grad_b from grad_out^T @ a", lambda i: MatmulGradBUntransposed.apply(i["a"], i["b"]),
         False, ["float32"]),
        ("layer_norm", "F.layer_norm", lambda i: F.layer_norm(
            i["x"], i["x"].shape[-1:], i.get("weight"), i.get("bias"), i.get("eps", 1e-5)), True, ["float32"]),
        ("layer_norm", "F.layer_norm in fp32, cast back", lambda i: F.layer_norm(
            i["x"].float(), i["x"].shape[-1:], None if i.get("weight") is None else i["weight"].float(),
            None if i.get("bias") is None else i["bias"].float(), i.get("eps", 1e-5)).to(i["x"].dtype), True, HALF),
        ("layer_norm", "layer_norm with grad_x missing the projection term", lambda i: LayerNormNoProjection.apply(
            i["x"], i["weight"] if i.get("weight") is not None else torch.ones_like(i["x"][..., 0, :]),
            i["bias"] if i.get("bias") is not None else torch.zeros_like(i["x"][..., 0, :]), i.get("eps", 1e-5)),
         False, ["float32"]),
        ("softmax", "torch.softmax", lambda i: torch.softmax(i["x"], i.get("dim", -1)), True, ["float32"]),
        ("softmax", "torch.softmax in fp32, cast back",
         lambda i: upcast(lambda x: torch.softmax(x, i.get("dim", -1)))(i["x"]), True, HALF),
        ("softmax", "softmax whose backward forgets − Σ g·y", lambda i: SoftmaxNoRowSum.apply(i["x"], i.get("dim", -1)),
         False, ["float32"]),
        ("log_softmax", "torch.log_softmax", lambda i: torch.log_softmax(i["x"], i.get("dim", -1)), True, ["float32"]),
        ("log_softmax", "torch.log_softmax in fp32, cast back",
         lambda i: upcast(lambda x: torch.log_softmax(x, i.get("dim", -1)))(i["x"]), True, HALF),
        ("log_softmax", "log_softmax whose backward is softmax's",
         lambda i: LogSoftmaxWithSoftmaxBackward.apply(i["x"], i.get("dim", -1)), False, ["float32"]),
        ("flash_attention", "softmax(q kᵀ·scale) v in fp32, cast back",
         lambda i: _attention_fp32(i["q"], i["k"], i["v"], bool(i.get("causal")), i.get("scale")).to(i["q"].dtype),
         True, ["float32"] + HALF),
        ("flash_attention", "attention whose dq forgets the scale",
         lambda i: AttentionDqWithoutScale.apply(i["q"], i["k"], i["v"], bool(i.get("causal")), i.get("scale")),
         False, ["float32"]),
        ("cross_entropy", "F.cross_entropy", lambda i: cross_entropy(i, i["logits"]), True, ["float32"]),
        ("cross_entropy", "F.cross_entropy in fp32, cast back", lambda i: cross_entropy(i, i["logits"].float()).to(
            i["logits"].dtype), True, HALF),
        ("cross_entropy", "cross_entropy ('mean') whose backward counts ignored rows",
         lambda i: CrossEntropyMeanOverAllRows.apply(i["logits"], i["target"], i.get("ignore_index", -100),
                                                     i.get("label_smoothing", 0.0))
         if i.get("reduction", "mean") == "mean" else cross_entropy(i, i["logits"]), False, ["float32"]),
    ] + ([("flash_attention", "F.scaled_dot_product_attention (aligned copies)", sdpa, True, ["float32"] + HALF)]
         if hasattr(F, "scaled_dot_product_attention") else [])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", nargs="*", help="only these forward ops")
    ap.add_argument("--markdown", help="write the table here too")
    args = ap.parse_args()
    rows = [f"backward=True on {args.device} ({torch.cuda.get_device_name(0) if args.device == 'cuda' else 'CPU'}), "
            f"torch {torch.__version__}, {args.cases} cases a run, master seed {args.seed}", "",
            "| op | kernel | expected | dtype | forward passed | gradients passed | worst gradient ratio | first failing gradient | s | verdict |",
            "|---|---|---|---|---:|---:|---:|---|---:|---|"]
    bad = 0
    with Client() as c:
        for op, label, run_op, correct, dtypes in kernels():
            if args.ops and op not in args.ops:
                continue
            for dt in dtypes:
                t0 = time.perf_counter()
                try:
                    r = c.fuzz_op_client_side(op, run_op, iterations=args.cases, dtypes=[dt], seed=args.seed,
                                              backward=True, device=args.device)
                except errors.GpuemuError as e:
                    rows.append(f"| {op} | {label} | {'correct' if correct else 'buggy'} | {dt} | - | - | - | "
                                f"refused: {str(e).splitlines()[0][:160]} | - | NOT RUN |")
                    bad += 1
                    continue
                g = r.gradients
                first = ""
                if g is not None and g.failures:
                    first = g.failures[0].message.split(";")[0][:120]
                caught = g is not None and g.failed > 0
                verdict = ("pass" if r.ok else "FALSE POSITIVE") if correct else ("caught" if caught else "MISSED")
                bad += verdict in ("FALSE POSITIVE", "MISSED")
                worst = "-" if g is None or g.worst_ratio is None else f"{g.worst_ratio:.3g}"
                rows.append(f"| {op} | {label} | {'correct' if correct else 'buggy'} | {dt} | {r.passed}/{r.total} | "
                            f"{'-' if g is None else f'{g.passed}/{g.total}'} | {worst} | {first} | "
                            f"{time.perf_counter() - t0:.1f} | {verdict} |")
                print(rows[-1], flush=True)
    text = "\n".join(rows) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
