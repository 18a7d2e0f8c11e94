#!/usr/bin/env python3
"""Capture failing Conformance cases on CUDA, to be explained on any machine.

    python3 -m bench.conformance.capture_cuda ROWS.jsonl [...] --out DIR [--only OP[:IMPL]] [--per-row K] [--unlisted]

For every failing run in the sweep's rows (skipping refused and unsupported cases), replays up to
``--per-row`` of its failing cases on the GPU exactly as the sweep ran them (same variant, flags,
dims, varied attrs, layouts) and writes one pickle per case into DIR: the case's exact input
snapshot (dtype, shape, strides, offset, storage bytes: it regenerates bit for bit anywhere), the
CUDA output and the same implementation's output on the CPU (numpy arrays as gpuemu judges them),
the verdict, and the names of the CUDA kernels the call launched (torch.profiler), which say which
algorithm ran (cuDNN's engine, a Welford or a two-pass norm, ...). Plain numpy and Python objects
only, so torch 1.13 on the development machine reads what torch 2.11 wrote.

``--settings`` re-judges each captured case under other backend settings (cuDNN deterministic, cuDNN
benchmark, cuDNN off) and records those verdicts too: whether the failure follows the algorithm.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pickle
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import torch

import gpuemu
from gpuemu import inprocess

from bench.conformance.impls import variants, varied_attrs
from bench.conformance.impls_cuda import ieee_defaults


@contextlib.contextmanager
def cudnn_setting(name: str) -> Iterator[None]:
    b = torch.backends.cudnn
    saved = (b.deterministic, b.benchmark, b.enabled)
    if name == "deterministic":
        b.deterministic = True
    elif name == "benchmark":
        b.benchmark = True
    elif name == "cudnn_off":
        b.enabled = False
    try:
        yield
    finally:
        b.deterministic, b.benchmark, b.enabled = saved


def kernels_of(fn: Any) -> List[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        if e.device_type.name == "CUDA" and e.name not in names:
            names.append(e.name)
    return names


def variant_of(row: Dict[str, Any]) -> Any:
    for v in variants([row["op"]], [row["dtype"]], "cuda"):
        if v.impl.name == row["impl"] and v.style == row["style"]:
            return v
    raise SystemExit(f"no variant {row['op']} {row['impl']} [{row['style']}] {row['dtype']}")


def judge(engine: Any, case: Any, out: Any) -> Dict[str, Any]:
    v = engine.judge(case, inprocess._outputs(out, case.dtype))
    return {k: v[k] for k in ("passed", "max_error", "envelope", "message") if k in v}


def capture(row: Dict[str, Any], failure: Dict[str, Any], settings: bool) -> Dict[str, Any]:
    v = variant_of(row)
    run_op = v.run_op()
    got = inprocess.replay(v.op, None, failure["seed"], value_distribution=row["strategy"], dtypes=[row["dtype"]],
                           dims=v.impl.dims, vary_attrs=varied_attrs(v.op) or None, precision=v.impl.precision)
    case = got["case"]
    engine = inprocess._engine()
    rec: Dict[str, Any] = {"row": {k: row[k] for k in ("op", "impl", "style", "dtype", "strategy", "seed")},
                           "failure": failure, "attrs": dict(case.attrs), "snapshot": case.snapshot(),
                           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    out: Dict[str, Any] = {}

    def run() -> None:
        out["y"] = run_op(inprocess.case_inputs(case, "torch", "cuda"))

    try:
        rec["kernels"] = kernels_of(run)
        rec["cuda_out"] = inprocess._outputs(out["y"], case.dtype)
        rec["verdict"] = judge(engine, case, out["y"])
    except Exception as e:  # noqa: BLE001 - a kernel's own error is part of what is recorded
        rec["error"] = f"{type(e).__name__}: {e}"
    try:
        cpu = v.run_op()(inprocess.case_inputs(case, "torch", "cpu"))
        rec["cpu_out"] = inprocess._outputs(cpu, case.dtype)
        rec["cpu_verdict"] = judge(engine, case, cpu)
    except Exception as e:  # noqa: BLE001
        rec["cpu_error"] = f"{type(e).__name__}: {e}"
    if settings:
        rec["settings"] = {}
        for name in ("deterministic", "benchmark", "cudnn_off"):
            with cudnn_setting(name):
                try:
                    y = run_op(inprocess.case_inputs(case, "torch", "cuda"))
                    rec["settings"][name] = judge(engine, case, y)
                    rec["settings"][name]["kernels"] = kernels_of(
                        lambda: run_op(inprocess.case_inputs(case, "torch", "cuda")))
                except Exception as e:  # noqa: BLE001
                    rec["settings"][name] = {"error": f"{type(e).__name__}: {e}"}
    return rec


def selected(rows: List[Dict[str, Any]], only: Optional[List[str]], unlisted: bool = False) -> Iterator[Dict[str, Any]]:
    from bench.conformance.sweep import imprecise_table, is_imprecise

    table = imprecise_table("cuda") if unlisted else {}
    for r in rows:
        if not r["failed"] or r.get("unsupported"):
            continue
        if unlisted and is_imprecise(table, r["op"], r["impl"], r["style"], r["dtype"], r["strategy"], r):
            continue
        if only and not any(r["op"] == o.split(":")[0] and (":" not in o or o.split(":", 1)[1] in r["impl"] + r["style"])
                            for o in only):
            continue
        yield r


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", help="the sweep's JSON lines")
    ap.add_argument("--out", required=True, help="folder for the pickles and index.jsonl")
    ap.add_argument("--only", nargs="*", help="OP or OP:substring of the implementation's name or style")
    ap.add_argument("--per-row", type=int, default=2, help="failing cases per run (default 2)")
    ap.add_argument("--settings", action="store_true", help="also judge under other cuDNN settings")
    ap.add_argument("--unlisted", action="store_true",
                    help="skip the runs of variants imprecise_cuda.py lists (their failures are explained)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("capture_cuda: no CUDA device", file=sys.stderr)
        return 1
    ieee_defaults()
    rows = [json.loads(line) for f in a.rows for line in open(f) if line.strip()]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(out / "index.jsonl", "a") as index:
        for r in selected(rows, a.only, a.unlisted):
            for f in r["failures"][: a.per_row]:
                if f.get("traceback") and any("No available kernel" in t or "misaligned" in t for t in f["traceback"]):
                    continue
                rec = capture(r, f, a.settings)
                name = f"{r['op']}-{r['style']}-{r['dtype']}-{r['strategy']}-{f['seed']:x}.pkl"
                with open(out / name, "wb") as fh:
                    pickle.dump(rec, fh)
                summary = {"file": name, **rec["row"], "impl": r["impl"], "kernels": rec.get("kernels"),
                           "verdict": rec.get("verdict"), "cpu_verdict": rec.get("cpu_verdict"),
                           "error": rec.get("error"), "settings": rec.get("settings")}
                index.write(json.dumps(summary, default=str) + "\n")
                index.flush()
                n += 1
                print(f"{name}: {json.dumps(rec.get('verdict'))[:200]}; cpu {json.dumps(rec.get('cpu_verdict'))[:120]}",
                      flush=True)
    print(f"capture_cuda: {n} cases into {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
