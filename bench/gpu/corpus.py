"""The GPU corpus run: every kernel of triton_corpus.py (and the CuPy RawKernels and JAX functions
below) fuzzed with ``Client().fuzz_op_client_side(..., device="cuda")`` as a user would call it,
beside the oracle the kernel benchmarks use today: KernelBench's ``torch.allclose(out, ref,
atol=1e-2, rtol=1e-2)`` and ``torch.testing.assert_close`` against PyTorch's own op, on one fixed
shape, one seed.

    python -m bench.gpu.corpus --json OUT.jsonl --markdown OUT.md [--jobs 8] [--deadline 420]

Runs on the GPU machine (scripts/gpu/run.sh). The table in evidence/gpu/corpus.md comes from here.
Correct kernels must pass (a failure is a false positive, or a real finding about the kernel or the
compiler: the row says which); every buggy kernel must be caught in the dtypes its bug affects.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

# JAX takes 75% of the GPU at its first use unless told not to; the pool's other workers (torch,
# Triton, CuPy) then run out of memory (a run of 14 workers without this lost 3 rows to OOM).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

ALL = ("float32", "float16", "bfloat16")
LOW = ("float16", "bfloat16")


@dataclass
class Entry:
    name: str  # kernel name in the table
    op: str
    fn: str  # "module:function" (+ kwargs), resolved in the worker
    kwargs: Dict[str, Any] = field(default_factory=dict)
    bug: str = ""  # bug class; "" for a correct kernel
    dtypes: Tuple[str, ...] = ALL
    bug_dtypes: Tuple[str, ...] = ALL  # where the bug changes the result
    framework: str = "torch"
    fuzz: Dict[str, Any] = field(default_factory=dict)  # present / precision / attrs / vary_attrs / dims
    iterations: int = 0  # cases per run (0: --iterations)


T = "bench.gpu.triton_corpus"  # where each entry's fn lives: "module:function"
C = "bench.gpu.cuda_corpus"
ATTN_ATTRS = ["causal", "scale", "enable_gqa"]
ENTRIES: List[Entry] = [
    # correct kernels
    Entry("softmax (tutorial, one block per row)", "softmax", f"{T}:softmax"),
    Entry("softmax (online, 1024-wide blocks)", "softmax", f"{T}:online_softmax"),
    Entry("log_softmax (online)", "log_softmax", f"{T}:online_softmax", {"log": True}),
    Entry("layer_norm (tutorial)", "layer_norm", f"{T}:layer_norm", fuzz={"present": {"weight": True, "bias": True}}),
    Entry("rms_norm", "rms_norm", f"{T}:rms_norm", fuzz={"present": {"weight": True}}),
    Entry("matmul (tl.dot, ieee for fp32)", "matmul", f"{T}:matmul"),
    Entry("matmul fp32 tf32 (declared: precision tf32)", "matmul", f"{T}:matmul", {"precision": "tf32"},
          dtypes=("float32",), fuzz={"precision": {"matmul": "tf32"}}),
    Entry("flash attention fwd", "flash_attention", f"{T}:attention", fuzz={"vary_attrs": ATTN_ATTRS}, iterations=60),
    Entry("flash attention fp32 tf32 (declared: precision tf32)", "flash_attention", f"{T}:attention",
          {"precision": "tf32"}, dtypes=("float32",),
          fuzz={"vary_attrs": ATTN_ATTRS, "precision": {"attention": "tf32"}}, iterations=60),
    Entry("flash attention fp32 tf32, boundary values (declared)", "flash_attention", f"{T}:attention",
          {"precision": "tf32"}, dtypes=("float32",),
          fuzz={"vary_attrs": ATTN_ATTRS, "precision": {"attention": "tf32"}, "value_distribution": "boundary"}),
    Entry("gelu (erf / tanh)", "gelu", f"{T}:gelu"),
    Entry("silu", "silu", f"{T}:silu"),
    Entry("swiglu", "swiglu", f"{T}:swiglu"),
    Entry("add (broadcast by strides)", "add", f"{T}:add"),
    Entry("cumsum (blocked scan)", "cumsum", f"{T}:cumsum"),
    Entry("cross_entropy", "cross_entropy", f"{T}:cross_entropy"),
    Entry("rope (HF cos/sin cache)", "rope", f"{T}:rope", fuzz={"vary_attrs": ["theta", "style", "offset"]}),
    Entry("embedding", "embedding", f"{T}:embedding"),
    Entry("softmax (CuPy RawKernel)", "softmax", f"{C}:softmax_cupy", dtypes=("float32",),
          framework="cupy", fuzz={"attrs": {"dim": -1}}),
    Entry("softmax (JAX jax.nn.softmax)", "softmax", f"{C}:softmax_jax", framework="jax"),
    # buggy kernels
    Entry("softmax: tail read as 0.0", "softmax", f"{T}:softmax", {"tail_zero": True}, bug="tail_leak"),
    Entry("softmax: assumes contiguous rows", "softmax", f"{T}:softmax", {"contiguous_assumed": True},
          bug="stride_assumption"),
    Entry("online softmax: sum not rescaled", "softmax", f"{T}:online_softmax", {"no_rescale": True},
          bug="online_no_rescale"),
    Entry("log_softmax: sum not rescaled", "log_softmax", f"{T}:online_softmax", {"log": True, "no_rescale": True},
          bug="online_no_rescale"),
    Entry("layer_norm: one-pass variance", "layer_norm", f"{T}:layer_norm", {"one_pass_var": True},
          bug="one_pass_variance", bug_dtypes=("float32", "float16"), fuzz={"present": {"weight": True, "bias": True}}),
    Entry("layer_norm: assumes contiguous rows", "layer_norm", f"{T}:layer_norm", {"contiguous_assumed": True},
          bug="stride_assumption", fuzz={"present": {"weight": True, "bias": True}}),
    Entry("rms_norm: mean over the padded block", "rms_norm", f"{T}:rms_norm", {"mean_over_block": True},
          bug="tail_leak", fuzz={"present": {"weight": True}}),
    Entry("matmul: acc = instead of +=", "matmul", f"{T}:matmul", {"overwrite": True}, bug="accumulator_overwrite"),
    Entry("matmul: accumulator in the input dtype", "matmul", f"{T}:matmul", {"low_acc": True},
          bug="low_precision_accumulator", dtypes=LOW, bug_dtypes=LOW),
    Entry("matmul fp32: Triton's default tf32, undeclared", "matmul", f"{T}:matmul", {"precision": "tf32"},
          bug="reduced_precision_undeclared", dtypes=("float32",), bug_dtypes=("float32",)),
    Entry("flash attention: no 1/sqrt(D)", "flash_attention", f"{T}:attention", {"no_scale": True},
          bug="missing_scale", fuzz={"vary_attrs": ATTN_ATTRS}),
    Entry("flash attention fp32 tf32 (declared): no 1/sqrt(D)", "flash_attention", f"{T}:attention",
          {"precision": "tf32", "no_scale": True}, bug="missing_scale", dtypes=("float32",),
          bug_dtypes=("float32",), fuzz={"vary_attrs": ATTN_ATTRS, "precision": {"attention": "tf32"}}),
    Entry("flash attention fp32: Triton's default tf32, undeclared", "flash_attention", f"{T}:attention",
          {"precision": "tf32"}, bug="reduced_precision_undeclared", dtypes=("float32",), bug_dtypes=("float32",),
          fuzz={"vary_attrs": ATTN_ATTRS}),
    Entry("flash attention: acc not rescaled", "flash_attention", f"{T}:attention", {"no_rescale": True},
          bug="online_no_rescale", fuzz={"vary_attrs": ATTN_ATTRS}),
    Entry("flash attention: causal j < i", "flash_attention", f"{T}:attention", {"causal_strict": True},
          bug="mask_off_by_one", fuzz={"vary_attrs": ATTN_ATTRS}),
    Entry("gelu: tanh form for approximate='none'", "gelu", f"{T}:gelu", {"tanh_for_erf": True},
          bug="wrong_formula"),
    Entry("swiglu: silu on up, not gate", "swiglu", f"{T}:swiglu", {"swapped": True}, bug="wrong_operand"),
    Entry("cumsum: carry in the input dtype", "cumsum", f"{T}:cumsum", {"low_carry": True},
          bug="low_precision_accumulator", dtypes=LOW, bug_dtypes=LOW),
    Entry("cross_entropy: logsumexp without the max", "cross_entropy", f"{T}:cross_entropy", {"no_max": True},
          bug="overflow"),
    Entry("rope: decode offset ignored", "rope", f"{T}:rope", {"ignore_offset": True}, bug="position_offset",
          fuzz={"vary_attrs": ["theta", "style", "offset"]}),
    Entry("softmax (CuPy): one element per thread", "softmax", f"{C}:softmax_cupy", {"one_per_thread": True},
          bug="tail_leak", dtypes=("float32",), framework="cupy", fuzz={"attrs": {"dim": -1}}),
]


# -----------------------------------------------------------------------------------------------
# The fixed-shape oracle of today's benchmarks


def _fixed_inputs(op: str, dtype: str, framework: str) -> Dict[str, Any]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]

    def randn(*shape):
        return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dt)

    if op in ("softmax", "log_softmax", "cumsum"):
        return {"x": randn(256, 4096), "dim": -1}
    if op in ("gelu", "silu"):
        return {"x": randn(256, 4096), "approximate": "none"}
    if op == "swiglu":
        return {"gate": randn(256, 4096), "up": randn(256, 4096)}
    if op == "add":
        return {"a": randn(256, 4096), "b": randn(256, 4096)}
    if op == "layer_norm":
        return {"x": randn(256, 4096), "weight": randn(4096), "bias": randn(4096), "eps": 1e-5}
    if op == "rms_norm":
        return {"x": randn(256, 4096), "weight": randn(4096), "eps": 1e-6}
    if op == "matmul":
        return {"a": randn(1024, 1024), "b": randn(1024, 1024)}
    if op == "flash_attention":
        return {"q": randn(2, 8, 512, 64), "k": randn(2, 8, 512, 64), "v": randn(2, 8, 512, 64),
                "causal": False, "scale": None, "enable_gqa": False}
    if op == "cross_entropy":
        return {"logits": randn(512, 32000), "target": torch.randint(0, 32000, (512,), generator=g, device="cuda"),
                "ignore_index": -100, "reduction": "mean", "label_smoothing": 0.0}
    if op == "rope":
        return {"x": randn(2, 512, 8, 128), "theta": 10000.0, "style": "half", "offset": 0}
    if op == "embedding":
        return {"weight": randn(32000, 1024), "indices": torch.randint(0, 32000, (4, 512), generator=g, device="cuda")}
    raise KeyError(op)


def _torch_reference(op: str, a: Dict[str, Any]) -> Any:
    import torch
    import torch.nn.functional as F
    from bench.conformance import impls

    if op == "softmax":
        return torch.softmax(a["x"], dim=a["dim"])
    if op == "log_softmax":
        return torch.log_softmax(a["x"], dim=a["dim"])
    if op == "cumsum":
        return torch.cumsum(a["x"], dim=a["dim"])
    if op == "gelu":
        return F.gelu(a["x"], approximate=a["approximate"])
    if op == "silu":
        return F.silu(a["x"])
    if op == "swiglu":
        return F.silu(a["gate"]) * a["up"]
    if op == "add":
        return a["a"] + a["b"]
    if op == "layer_norm":
        return F.layer_norm(a["x"], a["x"].shape[-1:], a["weight"], a["bias"], a["eps"])
    if op == "rms_norm":
        return impls.rms_norm_fp32(a)
    if op == "matmul":
        return a["a"] @ a["b"]
    if op == "flash_attention":
        return F.scaled_dot_product_attention(a["q"], a["k"], a["v"], is_causal=a["causal"], scale=a["scale"])
    if op == "cross_entropy":
        return F.cross_entropy(a["logits"], a["target"], ignore_index=a["ignore_index"], reduction=a["reduction"],
                               label_smoothing=a["label_smoothing"])
    if op == "rope":
        return impls.rope_fp32(a)
    if op == "embedding":
        return F.embedding(a["indices"], a["weight"])
    raise KeyError(op)


def _to_framework(a: Dict[str, Any], framework: str) -> Dict[str, Any]:
    if framework == "torch":
        return a
    import torch

    out = {}
    for k, v in a.items():
        if isinstance(v, torch.Tensor):
            if framework == "cupy":
                import cupy as cp

                out[k] = cp.from_dlpack(v.contiguous())
            else:
                import jax.dlpack

                out[k] = jax.dlpack.from_dlpack(v.contiguous())
        else:
            out[k] = v
    return out


def _to_torch(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return v
    return torch.from_dlpack(v)


def fixed_shape_checks(e: Entry, fn: Callable, dtype: str) -> Dict[str, Any]:
    """KernelBench's allclose(atol=rtol=1e-2) and torch's assert_close on one shape, one seed."""
    import torch

    a = _fixed_inputs(e.op, dtype, e.framework)
    ref = _torch_reference(e.op, a)
    out = _to_torch(fn(_to_framework(a, e.framework))).to(ref.dtype)
    torch.cuda.synchronize()
    row = {"allclose": bool(torch.allclose(out, ref, atol=1e-2, rtol=1e-2))}
    try:
        torch.testing.assert_close(out, ref)
        row["assert_close"] = True
    except AssertionError:
        row["assert_close"] = False
    return row


# -----------------------------------------------------------------------------------------------


def softmax_evidence(e: Entry, fn: Callable, dtype: str, dims: Dict[str, int]) -> Dict[str, Any]:
    """For a softmax that gpuemu flags: on randn rows of the failing case's shape, how far its rows'
    sums are from 1 (a correctly rounded softmax stays within u_out of 1, whatever N) and its worst
    relative error against an fp64 softmax, in units of the output dtype's roundoff u_out (a softmax
    computed in fp32 and rounded once stays within about 1 u_out; past IMPRECISE_U the kernel's own
    arithmetic is coarser than that: verdict says so instead of calling the failure a false positive)."""
    import torch

    dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    u = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(dims.get("R", 64), dims.get("N", 1024), generator=g, device="cuda").to(dt)
    out = _to_torch(fn(_to_framework({"x": x, "dim": -1}, e.framework))).float()
    ref = torch.softmax(x.double(), dim=-1)
    row_sum_err = (out.double().sum(-1) - 1).abs().max().item()
    rel = ((out.double() - ref).abs() / ref).max().item()
    return {"shape": list(x.shape), "row_sum_error_in_u": row_sum_err / u, "max_rel_error_in_u": rel / u}


def _resolve(e: Entry) -> Callable[[Dict[str, Any]], Any]:
    import functools
    import importlib

    mod, name = e.fn.split(":")
    f = getattr(importlib.import_module(mod), name)
    return functools.partial(f, **e.kwargs) if e.kwargs else f


def run_one(job: Tuple[int, str, int, int]) -> Dict[str, Any]:
    index, dtype, seed, iterations = job
    e = ENTRIES[index]
    row: Dict[str, Any] = {"kernel": e.name, "op": e.op, "dtype": dtype, "bug": e.bug,
                           "buggy": bool(e.bug) and dtype in e.bug_dtypes, "framework": e.framework}
    try:
        import gpuemu

        fn = _resolve(e)
        t0 = time.perf_counter()
        res = gpuemu.Client().fuzz_op_client_side(e.op, fn, iterations=e.iterations or iterations, dtypes=[dtype], seed=seed,
                                                  framework=e.framework, device="cuda",
                                                  fail_fast=bool(e.bug), **e.fuzz)
        row.update({"cases": res.total, "failed": res.failed, "first_failure": res.first_failure,
                    "worst_ratio": res.worst_ratio, "seconds": round(time.perf_counter() - t0, 1)})
        if res.failures:
            f = res.failures[0]
            row["failure"] = {"dims": f.dims, "attrs": f.attrs, "layout": f.layout, "max_error": f.max_error,
                              "envelope": f.envelope, "message": (f.message or "")[:300],
                              "diagnosis": getattr(f, "diagnosis", None), "repro": f.repro,
                              "traceback": (f.traceback or "").strip().splitlines()[-1:]}
        if res.failures and not e.bug and e.op == "softmax":
            row["evidence"] = softmax_evidence(e, fn, dtype, res.failures[0].dims)
        row.update(fixed_shape_checks(e, fn, dtype))
    except Exception as exc:  # noqa: BLE001 - recorded in the table, never silently dropped
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        row["traceback"] = traceback.format_exc()[-2000:]
    return row


IMPRECISE_U = 2.0  # softmax_evidence's worst relative error, in u_out, that no fp32 softmax reaches
IMPRECISE = "flagged: the kernel's own imprecision"


def verdict(r: Dict[str, Any]) -> str:
    if "error" in r:
        return "ERROR"
    if r["buggy"]:
        return "caught" if r["failed"] else "MISSED"
    if r["bug"]:  # a bug that does not change this dtype's result (e.g. acc in fp32 for fp32)
        return "pass (bug inert here)" if not r["failed"] else "flagged"
    if not r["failed"]:
        return "pass"
    ev = r.get("evidence") or {}
    return IMPRECISE if ev.get("max_rel_error_in_u", 0.0) > IMPRECISE_U else "FALSE POSITIVE"


def markdown(rows: List[Dict[str, Any]], commit: str, device: str) -> str:
    out = [f"GPU corpus at commit {commit} on {device}.", "",
           "| kernel | dtype | gpuemu | cases (to 1st failure) | worst err/env | allclose 1e-2 | assert_close | s |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['kernel']} | {r['dtype']} | ERROR: {r['error'][:120]} | | | | | |")
            continue
        cases = f"{r['first_failure'] + 1} of {r['cases']}" if r["failed"] else str(r["cases"])
        if r.get("evidence"):
            ev = r["evidence"]
            cases += (f" (rows of {ev['shape']} sum to 1 ± {ev['row_sum_error_in_u']:.0f} u_out; "
                      f"worst relative error {ev['max_rel_error_in_u']:.0f} u_out)")
        ac = "pass" if r.get("allclose") else "FAIL"
        asc = "pass" if r.get("assert_close") else "FAIL"
        out.append(f"| {r['kernel']} | {r['dtype']} | {verdict(r)} | {cases} | {(r['worst_ratio'] or 0):.3g} | {ac} | {asc} "
                   f"| {r['seconds']} |")
    bugs = [r for r in rows if r.get("buggy") and "error" not in r]
    good = [r for r in rows if not r.get("bug") and "error" not in r]
    out += ["", f"Buggy kernel × dtype runs: {len(bugs)}, caught by gpuemu: {sum(1 for r in bugs if r['failed'])}, "
            f"by allclose: {sum(1 for r in bugs if not r.get('allclose'))}, "
            f"by assert_close: {sum(1 for r in bugs if not r.get('assert_close'))}.",
            f"Correct kernel × dtype runs: {len(good)}, flagged by gpuemu: {sum(1 for r in good if r['failed'])} "
            f"(false positives: {sum(1 for r in good if verdict(r) == 'FALSE POSITIVE')}; the kernel's own "
            f"imprecision, measured beside the run: {sum(1 for r in good if verdict(r) == IMPRECISE)}), "
            f"by allclose: {sum(1 for r in good if not r.get('allclose'))}, "
            f"by assert_close: {sum(1 for r in good if not r.get('assert_close'))}."]
    errs = [r for r in rows if "error" in r]
    if errs:
        out.append(f"Runs that errored (not counted above): {len(errs)}.")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--deadline", type=float, default=0, help="seconds; jobs not started by then are not run")
    ap.add_argument("--only", nargs="*", help="kernel names containing any of these")
    a = ap.parse_args()
    jobs = [(i, dt, a.seed, a.iterations) for i, e in enumerate(ENTRIES) for dt in e.dtypes
            if not a.only or any(s in e.name for s in a.only)]
    # the costly ops first, so that they overlap with the many cheap ones
    cost = {"flash_attention": 0, "matmul": 1, "cross_entropy": 2}
    jobs.sort(key=lambda j: cost.get(ENTRIES[j[0]].op, 9))
    t0 = time.time()
    rows: List[Dict[str, Any]] = []
    ctx = mp.get_context("spawn")
    with ctx.Pool(a.jobs) as pool, a.json.open("w") as fh:
        pending = [pool.apply_async(run_one, (j,)) for j in jobs]
        for j, p in zip(jobs, pending):
            left = (a.deadline - (time.time() - t0)) if a.deadline else None
            try:
                r = p.get(timeout=max(1.0, left) if left is not None else None)
            except mp.TimeoutError:
                e = ENTRIES[j[0]]
                r = {"kernel": e.name, "op": e.op, "dtype": j[1], "bug": e.bug, "framework": e.framework,
                     "buggy": bool(e.bug) and j[1] in e.bug_dtypes, "error": "not finished by the deadline"}
            rows.append(r)
            fh.write(json.dumps(r) + "\n")
            fh.flush()
            print(f"{time.time() - t0:6.0f}s {r['kernel'][:50]:50s} {r['dtype']:9s} {verdict(r)}", flush=True)
        pool.terminate()
    order = {(e.name): i for i, e in enumerate(ENTRIES)}
    rows.sort(key=lambda r: (order[r["kernel"]], ALL.index(r["dtype"])))
    if a.markdown:
        import subprocess

        commit = os.environ.get("GPUEMU_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
        import torch

        a.markdown.write_text(markdown(rows, commit, torch.cuda.get_device_name(0)))
    bad = [r for r in rows if verdict(r) in ("MISSED", "FALSE POSITIVE", "ERROR")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
