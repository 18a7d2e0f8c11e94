#!/usr/bin/env python3
"""Why does SDPA's memory-efficient backward fail under backward=True on CUDA (issues 17 and 20)?

evidence/gpu/sdpa/sdpa_backward_backends.txt: ``F.scaled_dot_product_attention`` forced to the efficient
backend, run as bench/gpu/backward_client.py runs it (``fuzz_op_client_side("flash_attention",
sdpa, backward=True, device="cuda")``, master seed 1, 60 cases a dtype), fails the gradients of 5-6
of the 11-12 cases it computes in every dtype (grad_v -5.8e-38 where the exact value is -5.7e-3),
while the math backend passes all 60. This draws the same cases and

1. runs the whole fuzz run (the daemon's verdicts, the calibrated model) once per variant of the
   wrapper, each changing one thing: the wrapper as it is (clones of q, k, v and of the incoming
   gradient, which keep a dense permuted layout); fresh contiguous q, k, v; a fresh contiguous
   grad_out; both; the half dtypes computed in fp32; grad_out scaled by 2^-8 before the kernel (the
   gradients scaled back, exact); and the math backend as the control;
2. for every case the wrapper fails (and the computed cases it passes, as controls), compares the
   efficient gradients with the math backend in float64 and gpuemu.reference's fp64 on the same
   tensors, prints the inputs' layouts and values, where the bad elements lie, and re-runs the
   case with one thing changed at a time;
3. counts why the efficient backend refuses the other cases (its "not used because" warnings).

Run on the GPU machine: scripts/gpu/run.sh classify-efficient (CLASSIFY_ARGS passed on).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

Args = Dict[str, Any]


# ---------------------------------------------------------------------------------------------
# the wrapper's variants (each a run_op for fuzz_op_client_side)

def _fresh(x):
    """a fresh contiguous copy (offset 0, row-major strides)"""
    import torch

    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)


def _call(q, k, v, a: Args, backend: str, prep_qkv: Callable, prep_g: Callable, upcast: bool = False,
          g_scale: float = 1.0, tap: Optional[Callable] = None):
    """backward_client.sdpa with its two preparation steps replaceable: ``prep_qkv`` (the wrapper:
    clone) on q, k, v and ``prep_g`` (the wrapper: clone) on the gradient reaching the output."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
          "flash": SDPBackend.FLASH_ATTENTION}[backend]
    h, hkv = q.shape[-3], k.shape[-3]
    dt = q.dtype
    q2, k2, v2 = (prep_qkv(t) for t in (q, k, v))
    if upcast:
        q2, k2, v2 = q2.float(), k2.float(), v2.float()
    if g_scale != 1.0:
        for t in (q2, k2, v2):
            if t.requires_grad:
                t.register_hook(lambda gr: gr / g_scale)
    with sdpa_kernel([be]):
        out = F.scaled_dot_product_attention(q2, k2, v2, is_causal=bool(a.get("causal")), scale=a.get("scale"),
                                             enable_gqa=h != hkv)
    if out.requires_grad:
        if tap is not None:  # sees the gradient as it reaches the output, before the wrapper's hook
            out.register_hook(tap)
        out.register_hook(lambda g: prep_g(g * g_scale if g_scale != 1.0 else g))
    return out.to(dt) if upcast else out


def _clone(t):
    return t.clone()


VARIANTS: Dict[str, Dict[str, Any]] = {
    "wrapper (clones)": dict(backend="efficient", prep_qkv=_clone, prep_g=_clone),
    "fresh contiguous q,k,v": dict(backend="efficient", prep_qkv=_fresh, prep_g=_clone),
    "fresh contiguous grad_out": dict(backend="efficient", prep_qkv=_clone, prep_g=_fresh),
    "fresh contiguous all": dict(backend="efficient", prep_qkv=_fresh, prep_g=_fresh),
    "computed in fp32": dict(backend="efficient", prep_qkv=_clone, prep_g=_clone, upcast=True),
    "grad_out x 2^-8 (grads x 2^8)": dict(backend="efficient", prep_qkv=_clone, prep_g=_clone, g_scale=2.0 ** -8),
    "math backend (control)": dict(backend="math", prep_qkv=_clone, prep_g=_clone),
}


def _layout(t) -> str:
    return f"{tuple(t.shape)} st{tuple(t.stride())} off{t.storage_offset()}"


# ---------------------------------------------------------------------------------------------
# detail of one captured case

def _grads(q, k, v, g, a: Args, **variant):
    """(grad_q, grad_k, grad_v) of the variant on leaves of the captured tensors (their layouts)."""
    import torch

    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    out = _call(*leaves, a, **variant)
    torch.autograd.backward(out, g)
    return [lf.grad for lf in leaves]


def _math64(q, k, v, g, a: Args):
    return _grads(*(_fresh(t).double() for t in (q, k, v, g)), a, backend="math", prep_qkv=_clone,
                  prep_g=_clone)


def _bad(x, m, dt) -> Tuple[int, float, Tuple[int, ...]]:
    """elements of x whose relative error to m (floored at 2^-20 of max|m|) exceeds 1e-3 (fp32) or
    4e-2 (fp16/bf16): (count, worst relative error, its index)"""
    import torch

    x, m = x.double(), m.double()
    floor = m.abs().max().clamp_min(1e-300) * 2.0 ** -20
    rel = (x - m).abs() / torch.maximum(m.abs(), floor)
    rel = torch.where(torch.isnan(rel), torch.full_like(rel, float("inf")), rel)
    lim = 1e-3 if dt == torch.float32 else 4e-2
    worst = int(rel.flatten().argmax())
    return int((rel > lim).sum()), float(rel.flatten()[worst]), tuple(int(i) for i in
                                                                      torch.unravel_index(torch.tensor(worst),
                                                                                          rel.shape))


def _lse_probe(q, k, v, g, a: Args, ref, dt, H: int, Hkv: int, scale: float) -> List[str]:
    """The efficient backward called directly (aten's _scaled_dot_product_efficient_attention and its
    _backward) with the forward's own saved out and logsumexp, then with the exact (fp64) logsumexp
    in its place, then with the exact out: which saved tensor carries the error."""
    import torch

    lines: List[str] = []
    if q.shape[0] * H * q.shape[2] * k.shape[2] > 2e8:
        return ["   lse probe skipped (the fp64 score matrix would be too large)"]
    try:
        causal = bool(a.get("causal"))
        qc, kc, vc, gc = (_fresh(t) for t in (q, k, v, g))
        if H != Hkv:
            kc, vc = kc.repeat_interleave(H // Hkv, 1), vc.repeat_interleave(H // Hkv, 1)
        out, lse, seed, off = torch.ops.aten._scaled_dot_product_efficient_attention(
            qc, kc, vc, None, True, 0.0, causal, scale=a.get("scale"))
        sc = (qc.double() @ kc.double().transpose(-1, -2)) * scale
        if causal:
            m = torch.ones(sc.shape[-2], sc.shape[-1], dtype=torch.bool, device=sc.device).tril()
            sc = sc.masked_fill(~m, float("-inf"))
        lse64 = torch.logsumexp(sc, -1)
        p64 = torch.softmax(sc, -1)
        out64 = p64 @ vc.double()
        del sc, p64
        Lq = q.shape[2]
        dl = (lse[..., :Lq].double() - lse64).abs()
        lines.append(f"   saved logsumexp {tuple(lse.shape)} {lse.dtype}: |lse - exact| max {float(dl.max()):.3g}, "
                     f"rows off by > 1e-3: {int((dl > 1e-3).sum())} of {dl.numel()}; out vs exact max rel "
                     f"{float((out.double() - out64).abs().max() / out64.abs().max()):.3g}")
        if int((dl > 1e-3).sum()):
            bad = (dl > 1e-3).nonzero()[:6].tolist()
            lines.append("      e.g. (b, h, row): " + ", ".join(
                f"{tuple(b)} lse {float(lse[b[0], b[1], b[2]]):.6g} exact {float(lse64[b[0], b[1], b[2]]):.6g}"
                for b in bad))
        lse_fix = lse.clone()
        lse_fix[..., :Lq] = lse64.float()

        def back(o, l_):
            gq, gk, gv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
                gc, qc, kc, vc, None, o, l_, seed, off, 0.0, [True, True, True, False], causal,
                scale=a.get("scale"))
            if H != Hkv:
                gk = gk.unflatten(1, (Hkv, H // Hkv)).sum(2)
                gv = gv.unflatten(1, (Hkv, H // Hkv)).sum(2)
            return gq, gk, gv

        for name, o, l_ in (("aten backward, its own out and lse", out, lse),
                            ("aten backward, the exact lse", out, lse_fix),
                            ("aten backward, the exact out", out64.to(out.dtype), lse),
                            ("aten backward, exact out and lse", out64.to(out.dtype), lse_fix)):
            got = back(o, l_)
            cells = []
            for n, x, r in zip(("grad_q", "grad_k", "grad_v"), got, ref):
                cnt, worst, _ = _bad(x, r, dt)
                cells.append(f"{n} {cnt} bad (worst {worst:.3g})")
            lines.append(f"   probe {name:42s}: " + "; ".join(cells))
    except Exception as e:  # noqa: BLE001
        lines.append(f"   lse probe raised {str(e).splitlines()[0][:200]}")
    return lines


def _tf32(x):
    """x (fp32) rounded to nearest-even on TF32's 10 explicit mantissa bits (11 significant)"""
    import torch

    if x.dtype != torch.float32:
        return x
    i = x.contiguous().view(torch.int32)
    i = (i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF
    return i.view(torch.float32).reshape(x.shape)


def _p_rows(q, k, v, a: Args, backend: str, rows: List[int]) -> List[str]:
    """The kernel's own recomputed P, read off its grad_v: with grad_out one-hot at (row i, column 0)
    of every (batch, head), grad_v[..., j, 0] = P[i, j] as the backward recomputed it (then rounded
    to the dtype for the P^T dO product). Compared with the exact P in the log: the error of the
    recomputed score S - lse, against sum_d |q_d k_d| * scale (the bound that scales with a GEMM's
    unit roundoff): the effective unit roundoff of the scores the backward uses."""
    import torch

    B, H, Lq, D = q.shape
    s = a.get("scale")
    s = 1.0 / math.sqrt(D) if s is None else float(s)
    out = []
    for i in rows:
        g = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
        g[:, :, i, 0] = 1.0
        _, _, gv = _grads(q, k, v, g, a, backend=backend, prep_qkv=_clone, prep_g=_clone)
        pk = gv[:, :, :, 0].double()  # (B, H, Lk)
        qi = q[:, :, i, :].double()  # (B, H, D)
        sc = torch.einsum("bhd,bhjd->bhj", qi, k.double()) * s
        if a.get("causal"):
            sc[:, :, i + 1:] = float("-inf")
        p = torch.softmax(sc, -1)
        mag = torch.einsum("bhd,bhjd->bhj", qi.abs(), k.double().abs()) * s
        ok = (p > 1e-30) & (pk > 0) & (p < 0.5)
        if not bool(ok.any()):
            out.append(f"row {i}: no comparable entries")
            continue
        err = (pk[ok].log() - p[ok].log()).abs()
        u = err / mag[ok]
        zero = int(((pk == 0) & (p > 1e-30)).sum())
        out.append(f"row {i}: |log P err| max {float(err.max()):.3g} median {float(err.median()):.3g}; "
                   f"/ sum|q k|*scale: max {float(u.max()):.3g} (2^{math.log2(float(u.max())):.1f}) median "
                   f"{float(u.median()):.3g}; P flushed to 0 where exact > 1e-30: {zero}; "
                   f"sum|q k|*scale up to {float(mag.max()):.3g}")
    return out


def _stats(t) -> str:
    import torch

    x = t.double()
    nz = x[x != 0].abs()
    tiny = torch.finfo(t.dtype).tiny
    rows_zero = int((x.abs().amax(-1) == 0).sum())
    return (f"max|.| {float(x.abs().max()):.3g} min|.|>0 {float(nz.min()) if nz.numel() else 0:.3g} "
            f"zeros {1 - nz.numel() / x.numel():.2f} subnormal {int(((nz < tiny)).sum())} "
            f"all-zero rows {rows_zero}/{x[..., 0].numel()}")


def detail(idx: int, cap: Dict[str, Any], verdict: str, dt_name: str) -> List[str]:
    import numpy as np
    import torch

    import gpuemu

    q, k, v, g, a = cap["q"], cap["k"], cap["v"], cap["g"], cap["attrs"]
    dt = q.dtype
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    lines = [f"-- {dt_name} case {idx} ({verdict}): B {B} H {H} Hkv {Hkv} Lq {Lq} Lk {Lk} D {D} "
             f"causal {a.get('causal')} scale {a.get('scale')}"]
    for n, t in (("q", q), ("k", k), ("v", v), ("grad_out", g)):
        lines.append(f"   {n:8s} as received {_layout(t)}; the wrapper's clone {_layout(t.clone())}")
    lines.append(f"   grad_out values: {_stats(g)}")
    lines.append(f"   q values: {_stats(q)}; k values: {_stats(k)}; v values: {_stats(v)}")
    s = a.get("scale")
    s = 1.0 / math.sqrt(D) if s is None else float(s)
    if B * H * Lq * Lk <= 2e8:
        kk = k.double().repeat_interleave(H // Hkv, 1) if H != Hkv else k.double()
        sc = (q.double() @ kk.transpose(-1, -2)) * s
        lse = torch.logsumexp(sc, -1)
        lines.append(f"   scores: max {float(sc.max()):.3g} min {float(sc.min()):.3g}; lse range "
                     f"[{float(lse.min()):.3g}, {float(lse.max()):.3g}]")
        del sc, kk
    attrs = {"causal": bool(a.get("causal")), "enable_gqa": H != Hkv}
    if a.get("scale") is not None:
        attrs["scale"] = float(a["scale"])
    ref = gpuemu.reference("flash_attention_backward", {"q": q, "k": k, "v": v, "grad_out": g}, **attrs)
    ref = [torch.from_numpy(np.asarray(r)).to(q.device) for r in ref]
    m64 = _math64(q, k, v, g, a)
    agree = max(float((x - r).abs().max() / r.abs().max().clamp_min(1e-300)) for x, r in zip(m64, ref))
    lines.append(f"   math backend in float64 vs gpuemu.reference: max |diff| / max|ref| {agree:.2e}")
    mdt = _grads(q, k, v, g, a, backend="math", prep_qkv=_clone, prep_g=_clone)
    base = _grads(q, k, v, g, a, **VARIANTS["wrapper (clones)"])
    names = ("grad_q", "grad_k", "grad_v")
    for n, x, xm, r, r64 in zip(names, base, mdt, m64, ref):
        cnt, worst, at = _bad(x, r64, dt)
        cm, wm, _ = _bad(xm, r64, dt)
        lines.append(f"   {n}: efficient {cnt} bad of {x.numel()} (worst rel {worst:.3g} at {at}: efficient "
                     f"{float(x[at]):.6g}, math64 {float(r[at]):.6g}, gpuemu ref {float(r64[at]):.6g}); "
                     f"math in {dt_name}: {cm} bad (worst rel {wm:.3g})")
        if cnt:
            xr = (x.double() - r64).abs() / torch.maximum(r64.abs(), r64.abs().max() * 2.0 ** -20)
            bad = (xr > (1e-3 if dt == torch.float32 else 4e-2)).nonzero()
            rows = sorted(set(int(i) for i in bad[:, 2]))
            heads = sorted(set((int(b), int(h)) for b, h in bad[:, :2]))
            lines.append(f"      bad rows (dim 2) {rows[:12]}{' ...' if len(rows) > 12 else ''} of "
                         f"{x.shape[2]}; (b, h) {heads[:8]}{' ...' if len(heads) > 8 else ''}")
    # one thing changed at a time, on the same tensors
    probes: List[Tuple[str, Callable[[], Any]]] = [
        ("wrapper again", lambda: _grads(q, k, v, g, a, **VARIANTS["wrapper (clones)"])),
        ("fresh contiguous q,k,v", lambda: _grads(q, k, v, g, a, **VARIANTS["fresh contiguous q,k,v"])),
        ("fresh contiguous grad_out", lambda: _grads(q, k, v, g, a, **VARIANTS["fresh contiguous grad_out"])),
        ("fresh contiguous all", lambda: _grads(q, k, v, g, a, **VARIANTS["fresh contiguous all"])),
        ("grad_out passed contiguous to backward()", lambda: _grads(q, k, v, _fresh(g), a,
                                                                    **VARIANTS["wrapper (clones)"])),
        ("grad_out x 2^-8", lambda: _grads(q, k, v, g, a, **VARIANTS["grad_out x 2^-8 (grads x 2^8)"])),
        ("computed in fp32", lambda: _grads(q, k, v, g, a, **VARIANTS["computed in fp32"])),
        ("math backend in the dtype", lambda: mdt),
    ]
    for name, fn in probes:
        try:
            got = fn()
            cells = []
            for n, x, r in zip(names, got, ref):
                cnt, worst, _ = _bad(x, r, dt)
                cells.append(f"{n} {cnt} bad (worst {worst:.3g})")
            lines.append(f"   probe {name:42s}: " + "; ".join(cells))
        except Exception as e:  # noqa: BLE001 - a refusal is an answer
            lines.append(f"   probe {name:42s}: raised {str(e).splitlines()[0][:150]}")
    # the values: q scaled by 2^-4 (exact; the scores shrink 16x), judged against its own reference
    for name, sq in (("q x 2^-4 (scores / 16)", 2.0 ** -4), ("q x 2^-8 (scores / 256)", 2.0 ** -8)):
        try:
            q2 = q * sq
            got = _grads(q2, k, v, g, a, **VARIANTS["wrapper (clones)"])
            r2 = gpuemu.reference("flash_attention_backward", {"q": q2, "k": k, "v": v, "grad_out": g}, **attrs)
            r2 = [torch.from_numpy(np.asarray(r)).to(q.device) for r in r2]
            cells = []
            for n, x, r in zip(names, got, r2):
                cnt, worst, _ = _bad(x, r, dt)
                cells.append(f"{n} {cnt} bad (worst {worst:.3g})")
            lines.append(f"   probe {name:42s}: " + "; ".join(cells))
        except Exception as e:  # noqa: BLE001
            lines.append(f"   probe {name:42s}: raised {str(e).splitlines()[0][:150]}")
    lines.extend(_lse_probe(q, k, v, g, a, ref, dt, H, Hkv, s))
    if H == Hkv:
        rows = sorted({0, Lq // 2, Lq - 1})
        for backend in ("efficient", "math"):
            for line in _p_rows(q, k, v, a, backend, rows):
                lines.append(f"   P read off grad_v, {backend:9s} {line}")
        if dt == torch.float32:
            qt, kt = _tf32(q), _tf32(k)
            for line in _p_rows(qt, kt, v, a, "efficient", rows):
                lines.append(f"   P read off grad_v, efficient on q, k rounded to TF32 {line}")
    return lines


# ---------------------------------------------------------------------------------------------
# one fuzz run

def run(key: Tuple[str, str], cases: int, seed: int, want_detail: bool, device: str = "cuda") -> Dict[str, Any]:
    import torch

    from gpuemu import Client

    variant, dtype = key
    spec = dict(VARIANTS[variant])
    caps: Dict[int, Dict[str, Any]] = {}
    reasons: Counter = Counter()
    counter = {"bwd": 0}

    def run_op(i: Args):
        q, k, v = i["q"], i["k"], i["v"]
        grad_phase = q.requires_grad
        idx = counter["bwd"] if grad_phase else -1
        if grad_phase:
            counter["bwd"] += 1
        cap = {"q": q.detach(), "k": k.detach(), "v": v.detach(),
               "attrs": {n: x for n, x in i.items() if not torch.is_tensor(x) and x is not None}}

        def grab(g, cap=cap):
            cap["g"] = g.detach()

        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                out = _call(q, k, v, i, **spec, tap=grab if grad_phase and want_detail else None)
            except Exception:
                if grad_phase:
                    for m in w:
                        first = str(m.message).strip().splitlines()[0][:110] if str(m.message).strip() else ""
                        if first:
                            reasons[first] += 1
                raise
        if grad_phase and want_detail:
            caps[idx] = cap
        return out

    t0 = time.perf_counter()
    with Client() as c:
        r = c.fuzz_op_client_side("flash_attention", run_op, iterations=cases, dtypes=[dtype], seed=seed,
                                  backward=True, device=device, diagnose_limit=0)
    g = r.gradients
    fails = [] if g is None else g.failures
    raised = [f for f in fails if f.traceback]
    numeric = [f for f in fails if not f.traceback]
    raised_msgs = Counter(f.traceback.strip().splitlines()[-1][:100] for f in raised)
    out: Dict[str, Any] = {
        "variant": variant, "dtype": dtype, "fwd": f"{r.passed}/{r.total}",
        "grad_total": 0 if g is None else g.total, "grad_passed": 0 if g is None else g.passed,
        "raised": len(raised), "numeric": len(numeric),
        "failing": [(f.index, f.dims.get("D"), f.dims.get("Lq"), f.dims.get("Lk"), f.attrs.get("causal"),
                     f.message.split(";")[0][:110]) for f in numeric],
        "raised_msgs": raised_msgs.most_common(4), "reasons": reasons.most_common(8),
        "seconds": round(time.perf_counter() - t0, 1), "detail": []}
    if want_detail:
        failing = {f.index for f in numeric}
        computed = sorted(ix for ix in caps if "g" in caps[ix])
        controls = [ix for ix in computed if ix not in failing][:2]
        dims_of = {f.index: f.dims for f in numeric}
        for ix in sorted(failing) + controls:
            if ix not in caps or "g" not in caps[ix]:
                out["detail"].append(f"-- case {ix}: not captured (index mismatch?)")
                continue
            if ix in dims_of and dims_of[ix].get("D") not in (None, caps[ix]["q"].shape[-1]):
                out["detail"].append(f"-- case {ix}: captured D {caps[ix]['q'].shape[-1]} is not the failure's "
                                     f"{dims_of[ix].get('D')} (index mismatch)")
            try:
                out["detail"].extend(detail(ix, caps[ix], "FAILS" if ix in failing else "passes (control)",
                                            dtype))
            except Exception:  # noqa: BLE001
                out["detail"].append(f"-- case {ix}: detail raised {traceback.format_exc()[-600:]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--dtypes", nargs="*", default=["float32", "float16", "bfloat16"])
    a = ap.parse_args()
    import multiprocessing as mp

    keys = [(v, d) for v in a.variants for d in a.dtypes
            if not (v == "computed in fp32" and d == "float32")]
    with ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {k: pool.submit(run, k, a.cases, a.seed, k[0] == "wrapper (clones)", a.device) for k in keys}
        rows = []
        for k in keys:
            try:
                rows.append(futures[k].result())
            except Exception as e:  # noqa: BLE001
                rows.append({"variant": k[0], "dtype": k[1], "error": repr(e)[:300]})
    import torch

    where = torch.cuda.get_device_name(0) if a.device == "cuda" else a.device
    print(f"flash_attention backward=True on {where}, torch {torch.__version__}, "
          f"master seed {a.seed}, {a.cases} cases a run; judged by the daemon (gpuemu's fp64 reference and model)")
    print()
    print("| variant | dtype | forward passed | gradients passed | raised | numeric failures | failing (index, D, Lq, Lk, causal) | s |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['variant']} | {r['dtype']} | error {r['error'][:120]} | | | | | |")
            continue
        print(f"| {r['variant']} | {r['dtype']} | {r['fwd']} | {r['grad_passed']}/{r['grad_total']} | "
              f"{r['raised']} | {r['numeric']} | {[f[:5] for f in r['failing']]} | {r['seconds']} |")
    print()
    for r in rows:
        if r.get("failing"):
            print(f"{r['variant']} {r['dtype']}: first failure: case {r['failing'][0][0]}: {r['failing'][0][5]}")
    print()
    for r in rows:
        if r.get("raised"):
            print(f"{r['variant']} {r['dtype']}: raised {r['raised']}: {r['raised_msgs']}; reasons {r['reasons']}")
    print()
    for r in rows:
        for line in r.get("detail", []):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
