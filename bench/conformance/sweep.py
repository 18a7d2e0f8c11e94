#!/usr/bin/env python3
"""The Conformance sweep: the implementations users already trust must pass gpuemu's judgement.

    .venv/bin/python -m bench.conformance.sweep                       # the full sweep
    .venv/bin/python -m bench.conformance.sweep --ops softmax gelu --seeds 1 --cases 20
    .venv/bin/python -m bench.conformance.sweep --markdown --json sweep.json
    .venv/bin/python -m bench.conformance.sweep --ops cross_entropy_backward --attr reduction=none

For every catalogue op, every dtype it lists and every implementation of bench/conformance/impls.py
(PyTorch's own op, native in the case dtype and upcast to fp32; or the plain fp32 composition where
torch 1.13 has none), under each value strategy (regular, boundary, adversarial, special) and
``--seeds`` master seeds: ``gpuemu.fuzz_op_in_process`` with ``--cases`` cases, layouts on, every
attr with schema values varied (but those ``--attr NAME=VALUE`` pins), the shipped envelopes. Each row: cases, failures, the worst
normalised error over the envelope (below 1 passes). Exit status 0 only when nothing failed, every
catalogue op has an implementation, and no native variant was skipped for a reason other than
torch lacking that dtype's CPU kernel. The native kernels of imprecise.py (PyTorch 1.13's bf16
kernels that keep an accumulator or a statistic in bf16, with their evidence: ``--evidence``) are
listed as "imprecise" and do not count against that gate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent

STRATEGIES = ("regular", "boundary", "adversarial", "special")
MASTER_SEED_BASE = 20261201  # master seed i of the sweep is MASTER_SEED_BASE + i


def _unsupported(tb: Optional[str]) -> bool:
    """torch has no kernel for this dtype (e.g. "not implemented for 'Half'"), or an SDPA backend
    refuses this shape ("No available kernel") or this alignment (the efficient backend's "p.query_ptr
    is not correctly aligned": a clean refusal, unlike the flash backend's crash on the same inputs,
    imprecise_cuda.py), or cuBLASLt refuses operands it cannot take (torch._scaled_mm with an
    operand 16-byte misaligned: "CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul", an error
    the call returns with the context intact): the case was not computed, so it is not judged."""
    return bool(tb) and ("not implemented for" in tb or "No available kernel" in tb
                         or "is not correctly aligned" in tb
                         or "CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul" in tb)


# CUDA's sticky errors: after one, "the process is in an inconsistent state and any further CUDA
# work will return the same error" (CUDA runtime API, cudaErrorIllegalAddress and its kin), so a run
# whose kernel hit one cannot judge its later cases.
_STICKY_CUDA_ERRORS = ("misaligned address", "an illegal memory access was encountered",
                       "unspecified launch failure", "an illegal instruction was encountered",
                       "device-side assert triggered", "invalid program counter", "hardware stack error")


def _breaks_context(tb: Optional[str]) -> bool:
    """The case raised one of CUDA's sticky errors (a crash of the kernel, not a refusal)."""
    return bool(tb) and "CUDA error" in tb and any(e in tb for e in _STICKY_CUDA_ERRORS)


def discount_after_crash(row: Dict[str, Any], failures: List[Any]) -> List[Any]:
    """The failures of a run whose kernel crashed with a sticky CUDA error, the crash counted once:
    every later case raises the same error in the broken context without running the kernel, so
    those cases are recorded as not run (`crashed_at`, `not_run_after_crash`) instead of failed.
    `row`'s cases and failed are adjusted; the failures that remain are returned."""
    crashes = [f.index for f in failures if _breaks_context(f.traceback)]
    if not crashes:
        return failures
    first = min(crashes)
    after = {id(f) for f in failures if f.index > first and _breaks_context(f.traceback)}
    row["crashed_at"] = first
    row["not_run_after_crash"] = len(after)
    row["cases"] -= len(after)
    row["failed"] -= len(after)
    return [f for f in failures if id(f) not in after]


def _commit() -> Optional[str]:
    """The gpuemu commit the run was judged at ($GPUEMU_SWEEP_COMMIT, else this checkout's HEAD, with
    "+dirty" when the error model's sources differ from it): rows of one table must come from one
    error model and one case generator, and the report says which commits it holds."""
    if os.environ.get("GPUEMU_SWEEP_COMMIT"):
        return os.environ["GPUEMU_SWEEP_COMMIT"]
    import subprocess

    root = HERE.parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "daemon", "include",
                                "schemas", "python"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def run_variant(key: Tuple[int, str, str], cases: int, seed: int, strategy: str,
                device: str = "cpu", pins: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One fuzz run of one variant: the row of the table (JSON-able); ``pins``: attrs held at a
    value (``--attr``), the others with schema values varied."""
    import torch

    torch.set_num_threads(1)
    import gpuemu
    from bench.conformance.impls import variants, varied_attrs

    if device != "cpu":
        from bench.conformance.impls_cuda import ieee_defaults

        ieee_defaults()
    index, op, dtype = key
    v = variants([op], [dtype], device)[index]
    t0 = time.perf_counter()
    res = gpuemu.fuzz_op_in_process(v.op, v.run_op(), iterations=cases, value_distribution=strategy,
                                    dtypes=[dtype], seed=seed, framework="torch", device=device,
                                    dims=v.impl.dims, precision=v.impl.precision,
                                    attrs=pins or None,
                                    vary_attrs=[n for n in varied_attrs(v.op) if n not in (pins or {})] or None,
                                    diagnose=False)
    row: Dict[str, Any] = {"op": v.op, "impl": v.impl.name, "style": v.style, "dtype": dtype,
                           "strategy": strategy, "seed": seed, "cases": res.total, "failed": res.failed,
                           "worst_ratio": res.worst_ratio, "worst_case": res.worst_index,
                           "seconds": round(time.perf_counter() - t0, 2), "device": device,
                           "torch": torch.__version__, "gpuemu": _commit()}
    if pins:
        row["attrs"] = pins
    if res.failures and all(_unsupported(f.traceback) for f in res.failures) and res.failed == res.total:
        row["unsupported"] = res.failures[0].traceback.strip().splitlines()[-1]
    else:
        # Cases a backend refused (a flash kernel for some head dims) are counted apart, not as
        # failures: the row's cases and failures are the cases the kernel computed.
        refused = [f for f in res.failures if _unsupported(f.traceback)]
        if refused:
            row["refused"] = len(refused)
            row["refused_why"] = refused[0].traceback.strip().splitlines()[-1]
            row["cases"] -= len(refused)
            row["failed"] -= len(refused)
            res.failures[:] = [f for f in res.failures if not _unsupported(f.traceback)]
            # The run's worst ratio was a refused case's (inf); what is known is the computed
            # failures' worst, or nothing (the passing cases' ratios are not reported one by one).
            ratios = [f.max_error / f.envelope for f in res.failures if f.envelope]
            row["worst_ratio"] = max(ratios) if ratios else None
        res.failures[:] = discount_after_crash(row, res.failures)
    row["failures"] = [{"index": f.index, "seed": f.seed, "dims": f.dims, "attrs": f.attrs, "layout": f.layout,
                        "max_error": f.max_error, "envelope": f.envelope, "message": f.message[:300],
                        "repro": f.repro, "traceback": (f.traceback or "").strip().splitlines()[-1:],
                        # per output: how many elements failed, how many of those are non-finite
                        # where the reference is not (or the reverse), how many NaN where it is
                        # finite (what an entry that knows its class by its failures reads)
                        "outputs": [{k: o.get(k) for k in ("name", "failing", "nonfinite_mismatch", "nan_where_finite")}
                                    for o in (f.verdict or {}).get("outputs", [])]}
                       for f in res.failures[:5]]
    return row


Job = Tuple[Tuple[int, str, str], int, int, str, str, Optional[Dict[str, Any]]]


def _job(args: Job) -> Dict[str, Any]:
    return run_variant(*args)


def plan(ops: Optional[Sequence[str]], dtypes: Optional[Sequence[str]], strategies: Sequence[str],
         seeds: int, cases: int, device: str = "cpu", first_seed: int = 1,
         pins: Optional[Dict[str, Any]] = None) -> List[Job]:
    from bench.conformance.impls import variants

    jobs = []
    per_key: Dict[Tuple[str, str], int] = {}
    for v in variants(ops, dtypes, device):
        i = per_key.get((v.op, v.dtype), 0)
        per_key[(v.op, v.dtype)] = i + 1
        for strategy in strategies:
            for s in range(seeds):
                jobs.append(((i, v.op, v.dtype), cases, MASTER_SEED_BASE + first_seed - 1 + s, strategy, device,
                             pins))
    # seed-major: a sweep cut short (or resumed across sessions) has covered every op and strategy
    # under its first seeds rather than a few ops under all of them
    jobs.sort(key=lambda j: j[2])
    return jobs


def imprecise_table(device: str, torch_version: Optional[str] = None) -> Dict[Tuple[str, ...], Any]:
    """The known imprecise implementations of `device` under `torch_version` (default: this process's
    torch). imprecise.py lists PyTorch 1.13's and 2.11's CPU ones, each with its evidence; under any
    other torch nothing is excused: a failure there is gated until it has evidence of its own. On CUDA:
    imprecise_cuda.py's table (PyTorch 2.11 on an H200)."""
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    if device != "cpu":
        from bench.conformance.imprecise_cuda import table_for as cuda_table

        return cuda_table(torch_version)
    from bench.conformance.imprecise import table_for

    return table_for(torch_version)


def imprecise_entry(table: Dict[Tuple[str, ...], Any], op: str, impl: str, style: str, dtype: str,
                    strategy: Optional[str] = None) -> Any:
    """The entry that lists a variant (see is_imprecise), or None."""
    keys = [(op, style, dtype), (op, impl, style, dtype)]
    if strategy is not None:
        keys += [(op, style, dtype, strategy), (op, impl, style, dtype, strategy)]
    return next((table[k] for k in keys if k in table), None)


def excuses_run(entry: Any, row: Optional[Dict[str, Any]]) -> bool:
    """Whether `entry` excuses the failures of `row`: always, unless the entry names its class by the
    shape of each failure (Imprecision.only); then only a row that holds every failure it counted
    (the sweep keeps five) with each one of that shape. Asked without a row, such an entry excuses
    nothing."""
    only = getattr(entry, "only", None)
    if only is None:
        return True
    if row is None:
        return False
    if not row.get("failed"):
        return True
    failures = row.get("failures") or []
    return len(failures) >= row["failed"] and all(only(f) for f in failures)


def is_imprecise(table: Dict[Tuple[str, ...], Any], op: str, impl: str, style: str, dtype: str,
                 strategy: Optional[str] = None, row: Optional[Dict[str, Any]] = None) -> bool:
    """Whether a run is listed: by (op, style, dtype), or by (op, implementation, style, dtype) where
    only one implementation of the op is at fault (imprecise_cuda.py's SDPA backends); or, where the
    defect shows under one value strategy only, by a key that ends in that strategy, (op, style,
    dtype, strategy) or (op, implementation, style, dtype, strategy) (imprecise_cuda.py's cuDNN
    convolutions: listing the whole variant would also excuse its failures under the other
    strategies). A strategy-keyed entry matches only the rows of that strategy: a query without
    one (`strategy` None) matches the variant-wide keys alone. An entry that knows its class by the
    shape of each failure (Imprecision.only) excuses a run `row` only as excuses_run says."""
    entry = imprecise_entry(table, op, impl, style, dtype, strategy)
    return entry is not None and excuses_run(entry, row)


def _torch_of(row: Dict[str, Any]) -> str:
    """The torch a row ran under; rows from before the field was written: 1.13 on the CPU (this
    machine's), 2.11 on the GPU machine (the only torch it has had)."""
    return row.get("torch", "1.13" if row.get("device", "cpu") == "cpu" else "2.11")


def summarize(rows: List[Dict[str, Any]], device: str = "cpu") -> Dict[Tuple[str, str, str, str, str], Dict[str, Any]]:
    """(op, impl, style, dtype, strategy) -> cases, failed, worst ratio over the seeds, and whether
    the variant is a known imprecise implementation under that strategy (imprecise.py,
    imprecise_cuda.py; decided per cell, since an entry may name the strategy)."""
    excused = {}  # torch version -> its imprecise table
    table: Dict[Tuple[str, str, str, str, str], Dict[str, Any]] = {}
    for r in rows:
        version = _torch_of(r)
        if version not in excused:
            excused[version] = imprecise_table(device, version)
        k = (r["op"], r["impl"], r["style"], r["dtype"], r["strategy"])
        t = table.setdefault(k, {"cases": 0, "failed": 0, "worst": 0.0, "runs": 0, "unsupported": None,
                                 "refused": 0, "not_run_after_crash": 0, "imprecise": True})
        # A cell is excused only when every one of its runs is (an entry may excuse runs by the
        # shape of their failures: Imprecision.only).
        t["imprecise"] = t["imprecise"] and is_imprecise(excused[version], r["op"], r["impl"], r["style"],
                                                         r["dtype"], r["strategy"], r)
        t["runs"] += 1
        if r.get("unsupported"):
            t["unsupported"] = r["unsupported"]
            continue
        t["cases"] += r["cases"]
        t["failed"] += r["failed"]
        t["refused"] += r.get("refused", 0)
        t["not_run_after_crash"] += r.get("not_run_after_crash", 0)
        worst = r["worst_ratio"]
        if worst is None:  # only refused cases failed: the computed ones' worst is not known
            worst = 0.0 if r.get("refused") and not r["failed"] else float("inf")
        t["worst"] = max(t["worst"], worst)
    return table


def markdown(table: Dict[Tuple[str, str, str, str, str], Dict[str, Any]], strategies: Sequence[str]) -> str:
    lines = ["| op | implementation | style | dtype | " + " | ".join(strategies) + " |",
             "|---|---|---|---|" + "---|" * len(strategies)]
    keys = sorted({k[:4] for k in table}, key=lambda k: (k[0], k[1], k[2], ("float32", "float16", "bfloat16",
                                                                             "float8_e4m3fn").index(k[3])))
    for k in keys:
        cells = []
        for s in strategies:
            t = table.get(k + (s,))
            if t is None:
                cells.append("-")
            elif t["unsupported"]:
                cells.append("n/a")
            else:
                refused = f" +{t['refused']} refused" if t["refused"] else ""
                if t["not_run_after_crash"]:
                    refused += f" +{t['not_run_after_crash']} not run after a crash"
                cells.append(f"{'imprecise ' if t['imprecise'] else ''}{t['failed']}/{t['cases']} ({t['worst']:.2f}){refused}")
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="*", help="only these ops (default: all)")
    ap.add_argument("--dtypes", nargs="*", help="only these dtypes")
    ap.add_argument("--strategies", nargs="*", default=list(STRATEGIES), choices=STRATEGIES)
    ap.add_argument("--seeds", type=int, default=5, help="master seeds per variant and strategy (default 5)")
    ap.add_argument("--first-seed", type=int, default=1,
                    help="the first master seed (1-based: --first-seed 2 --seeds 2 runs seeds 2 and 3)")
    ap.add_argument("--cases", type=int, default=100, help="cases per run (default 100)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--device", default="cpu", help="where the implementations run: cpu (default) or cuda")
    ap.add_argument("--json", help="write every run (JSON lines) here")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in --json and run only the missing ones")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--report", action="store_true",
                    help="print the Markdown table of the runs in --json (a finished or partial sweep) and exit")
    ap.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                    help="hold an attr at a value (repeatable; JSON values: --attr reduction=none, --attr dim=0); "
                         "the op's other attrs with schema values are varied")
    ap.add_argument("--evidence", action="store_true",
                    help="print the demonstrations of the known imprecise implementations and exit")
    a = ap.parse_args(argv)
    if a.report:
        with open(a.json) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        table = summarize(rows, a.device)
        print(f"{len(rows)} runs of {sorted({r['cases'] for r in rows})} cases, seeds "
              f"{sorted({r['seed'] for r in rows})}, torch {sorted({_torch_of(r) for r in rows})}, "
              f"gpuemu {sorted({str(r.get('gpuemu')) for r in rows})}\n")
        print(markdown(table, a.strategies))
        return 1 if sum(t["failed"] for t in table.values() if not t["imprecise"]) else 0
    if a.evidence and a.device != "cpu":
        import torch

        held = True
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
        for key, imp in imprecise_table(a.device).items():
            shown, holds = imp.demo()
            held &= holds
            print(f"- {' / '.join(key)}: {imp.what}. {shown}{'' if holds else ' (NO LONGER SHOWN: recheck this entry)'}")
        return 0 if held else 1
    if a.evidence:
        import torch
        from bench.conformance.imprecise import evidence, table_for

        held = True
        print(f"torch {torch.__version__}")
        for (op, style, dtype), (shown, holds) in evidence().items():
            imp = table_for(torch.__version__)[(op, style, dtype)]
            held &= holds or bool(imp.cpu_dependent)
            note = "" if holds else (f" (not on this CPU: {imp.cpu_dependent})" if imp.cpu_dependent
                                     else " (NO LONGER SHOWN: recheck this entry)")
            print(f"- {op} [{style}] {dtype}: {imp.what}. {shown}{note}")
        return 0 if held else 1

    from bench.conformance.impls import uncovered_ops

    IMPRECISE = imprecise_table(a.device)
    missing = [] if a.ops else uncovered_ops()
    pins: Dict[str, Any] = {}
    for text in a.attr:
        name, eq, value = text.partition("=")
        if not eq:
            ap.error(f"--attr {text}: expected NAME=VALUE")
        try:
            pins[name] = json.loads(value)
        except ValueError:
            pins[name] = value  # a bare string: reduction=none
    jobs = plan(a.ops, a.dtypes, a.strategies, a.seeds, a.cases, a.device, a.first_seed, pins or None)
    print(f"conformance sweep: {len(jobs)} runs of {a.cases} cases, {a.jobs} processes, "
          f"envelopes: {os.environ.get('GPUEMU_ENVELOPES', 'schemas/envelopes.json')}", file=sys.stderr)
    t0 = time.perf_counter()
    rows: List[Dict[str, Any]] = []
    if a.resume and a.json and os.path.exists(a.json):
        with open(a.json) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        done = {(r["op"], r["impl"], r["style"], r["dtype"], r["strategy"], r["seed"],
                 json.dumps(r.get("attrs"), sort_keys=True)) for r in rows}
        from bench.conformance.impls import variants

        def key(job: Job) -> Tuple[Any, ...]:
            (i, op, dt), _cases, seed, strategy, device, _pins = job
            v = variants([op], [dt], device)[i]
            return (op, v.impl.name, v.style, dt, strategy, seed, json.dumps(_pins, sort_keys=True))

        jobs = [j for j in jobs if key(j) not in done]
        print(f"resuming: {len(rows)} runs already done, {len(jobs)} to go", file=sys.stderr)
    out = open(a.json, "a" if a.resume else "w") if a.json else None
    ctx = mp.get_context("spawn")
    # On CUDA each run gets a process of its own: a kernel that raises a CUDA error (a misaligned
    # address) leaves its process's context broken, and every later case in it failed the same way.
    with ctx.Pool(max(1, a.jobs), maxtasksperchild=1 if a.device != "cpu" else None) as pool:
        for n, row in enumerate(pool.imap_unordered(_job, jobs), 1):
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
            if row["failed"] and not row.get("unsupported"):
                f = row["failures"][0]
                known = is_imprecise(IMPRECISE, row["op"], row["impl"], row["style"], row["dtype"], row["strategy"], row)
                print(f"{'imprecise' if known else 'FAIL'} {row['op']} {row['impl']} [{row['style']}] {row['dtype']} {row['strategy']} "
                      f"seed {row['seed']}: {row['failed']}/{row['cases']}, case {f['index']}: {f['message'][:160]}",
                      file=sys.stderr)
            if n % 50 == 0:
                print(f"  {n}/{len(jobs)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if out:
        out.close()
    table = summarize(rows, a.device)
    print(markdown(table, a.strategies) if a.markdown else
          "\n".join(f"{k}: {v}" for k, v in sorted(table.items())))
    failed = sum(t["failed"] for t in table.values() if not t["imprecise"])
    cases = sum(t["cases"] for t in table.values() if not t["imprecise"])
    imprecise_failed = sum(t["failed"] for t in table.values() if t["imprecise"])
    unsupported = sorted({(k[0], k[1], k[3]) for k, t in table.items() if t["unsupported"]})
    bad_skips = [k for k, t in table.items() if t["unsupported"] and k[2] != "native"]
    print(f"\n{cases} cases, {failed} failed, {len(unsupported)} native variants without a torch CPU kernel, "
          f"{imprecise_failed} failures of known imprecise implementations (imprecise.py, not gated), "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if missing:
        print(f"ops with no implementation: {', '.join(missing)}", file=sys.stderr)
    return 1 if failed or missing or bad_skips else 0


if __name__ == "__main__":
    sys.exit(main())
