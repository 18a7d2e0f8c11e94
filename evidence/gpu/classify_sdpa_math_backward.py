#!/usr/bin/env python3
"""Which step of SDPA's math backend makes its native fp16/bf16 backward fail on CUDA?

evidence/gpu/backward/conformance_cuda_backward4.md: autograd through ``torch._scaled_dot_product_attention_math``
run natively in fp16/bf16 on the H200 failed 7 of 16 runs (ratios 3.6-6.4; one bf16 case at tiny
values), while the same call upcast to fp32 passed every case. Before the model is widened or the
implementation listed as imprecise, this runs the sweep's exact cases (master seed 20261201, 100
cases per strategy, the sweep's dims and varied attrs) through variants that change one thing each:

- ``swept``: the sweep's call at 1fac4b5: a scale other than 1/sqrt(D) folded into q *in the case
  dtype* by the harness, GQA by repeat_interleave in the dtype;
- ``scale-arg``: the math backend called with torch 2's ``scale=`` and ``enable_gqa=`` arguments,
  so the harness rounds nothing itself (impls.flash_attention_backward_sdpa since);
- ``scale-arg, fp16/bf16 reduction allowed``: the same with
  ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`` (where torch has it): the math
  backend keeps its intermediates in the case dtype instead of fp32;
- ``emulated, fp32 intermediates, q folded in dtype``: the math backend's formulas in fp32 with only
  the harness's fold of the scale into q rounded to the dtype;
- ``emulated, fp32 intermediates``: the same without that rounding (should pass, as upcast does).

Run on the GPU machine (scripts/gpu/run.sh classify); prints one line per variant x dtype x strategy
and the first failures' messages.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Dict, List, Tuple

Args = Dict[str, Any]


def _scale(args: Args) -> float:
    s = args.get("scale")
    return 1.0 / math.sqrt(args["q"].shape[-1]) if s is None else float(s)


def _grads(q, k, v, fn, g):
    q = q.detach().requires_grad_(True)
    k = k.detach().requires_grad_(True)
    v = v.detach().requires_grad_(True)
    fn(q, k, v).backward(g)
    return q.grad, k.grad, v.grad


def swept(args: Args):
    """The sweep's call at 1fac4b5 (torch 1.13's way, kept under torch 2): the scale folded into q in
    the graph, GQA by repeat_interleave."""
    import torch

    h, hkv, d = args["q"].shape[-3], args["k"].shape[-3], args["q"].shape[-1]

    def f(q, k, v):
        if h != hkv:
            k, v = k.repeat_interleave(h // hkv, dim=-3), v.repeat_interleave(h // hkv, dim=-3)
        if args.get("scale") is not None:
            q = q * (args["scale"] * math.sqrt(d))
        return torch._scaled_dot_product_attention_math(q, k, v, None, 0.0, bool(args.get("causal")))[0]

    return _grads(args["q"], args["k"], args["v"], f, args["grad_out"])


def scale_arg(args: Args):
    import torch

    h, hkv = args["q"].shape[-3], args["k"].shape[-3]
    return _grads(args["q"], args["k"], args["v"], lambda q, k, v: torch._scaled_dot_product_attention_math(
        q, k, v, None, 0.0, bool(args.get("causal")), None, scale=args.get("scale"), enable_gqa=h != hkv)[0],
        args["grad_out"])


def scale_arg_lowp_reduction(args: Args):
    import torch

    flag = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    if flag is None:
        raise RuntimeError("this torch has no allow_fp16_bf16_reduction_math_sdp")
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    flag(True)
    try:
        return scale_arg(args)
    finally:
        flag(before)


def _emulated(args: Args, fold_in_dtype: bool):
    """softmax(q k^T * scale [causal]) v in fp32 from the case's q, k, v, where q is first multiplied by
    scale * sqrt(D) in the case dtype (the harness's fold) when fold_in_dtype and a scale is set."""
    import torch

    dt = args["q"].dtype
    q, k, v = args["q"], args["k"], args["v"]
    d = q.shape[-1]
    scale = _scale(args)
    h, hkv = q.shape[-3], k.shape[-3]

    def f(q, k, v):
        if fold_in_dtype and args.get("scale") is not None:
            q32 = (q * (args["scale"] * math.sqrt(d))).float()
            s_eff = 1.0 / math.sqrt(d)
        else:
            q32, s_eff = q.float(), scale
        k32, v32 = k.float(), v.float()
        if h != hkv:
            k32, v32 = k32.repeat_interleave(h // hkv, dim=-3), v32.repeat_interleave(h // hkv, dim=-3)
        s = (q32 @ k32.transpose(-1, -2)) * s_eff
        if args.get("causal"):
            lq, lk = s.shape[-2], s.shape[-1]
            mask = torch.ones(lq, lk, dtype=torch.bool, device=s.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, -1)  # top-left causal: every row attends key 0
        return (p @ v32).to(dt)

    return _grads(q, k, v, f, args["grad_out"])


VARIANTS: Dict[str, Callable[[Args], Any]] = {
    "swept": swept,
    "scale-arg": scale_arg,
    "scale-arg, fp16/bf16 reduction allowed": scale_arg_lowp_reduction,
    "emulated, fp32 intermediates, q folded in dtype": lambda a: _emulated(a, True),
    "emulated, fp32 intermediates": lambda a: _emulated(a, False),
}


def run(key: Tuple[str, str, str], cases: int, seed: int, device: str) -> Dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    import gpuemu
    from bench.conformance.impls import varied_attrs
    from bench.conformance.impls_cuda import ieee_defaults

    if device == "cuda":
        ieee_defaults()
    name, dtype, strategy = key
    t0 = time.perf_counter()
    res = gpuemu.fuzz_op_in_process("flash_attention_backward", VARIANTS[name], iterations=cases,
                                    value_distribution=strategy, dtypes=[dtype], seed=seed, framework="torch",
                                    device=device, vary_attrs=varied_attrs("flash_attention_backward") or None,
                                    diagnose=False)
    lines = [str(f).splitlines()[0][:400] for f in res.failures[:3]]
    return {"variant": name, "dtype": dtype, "strategy": strategy, "cases": res.total, "failed": res.failed,
            "worst": res.worst_ratio, "seconds": round(time.perf_counter() - t0, 1), "first": lines,
            "math_sdp_lowp_default": getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed",
                                             lambda: None)()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--strategies", nargs="*", default=["regular", "boundary", "adversarial", "special"])
    a = ap.parse_args()
    keys = [(v, d, s) for v in a.variants for d in a.dtypes for s in a.strategies]
    import multiprocessing as mp

    with ProcessPoolExecutor(a.jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {k: pool.submit(run, k, a.cases, a.seed, a.device) for k in keys}
        rows: List[Dict[str, Any]] = []
        for k in keys:
            try:
                rows.append(futures[k].result())
            except Exception as e:  # noqa: BLE001 - a variant this torch cannot run is reported, not fatal
                rows.append({"variant": k[0], "dtype": k[1], "strategy": k[2], "error": repr(e)[:300]})
    print(f"seed {a.seed}, {a.cases} cases per row; math SDP fp16/bf16 reduction allowed by default: "
          f"{next((r['math_sdp_lowp_default'] for r in rows if 'math_sdp_lowp_default' in r), '?')}")
    print("| variant | dtype | regular | boundary | adversarial | special |")
    print("|---|---|---|---|---|---|")
    for v in a.variants:
        for d in a.dtypes:
            cells = []
            for s in a.strategies:
                r = next(r for r in rows if (r["variant"], r["dtype"], r["strategy"]) == (v, d, s))
                cells.append(r.get("error", "")[:60] if "error" in r
                             else f"{r['failed']}/{r['cases']} ({r['worst']:.3g})")
            print(f"| {v} | {d} | " + " | ".join(cells) + " |")
    print()
    for r in rows:
        for line in r.get("first", []):
            print(f"{r['variant']} {r['dtype']} {r['strategy']}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
