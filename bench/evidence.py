#!/usr/bin/env python3
"""Evidence: gpuemu against the usual baselines on the corpus of correct and buggy kernels.

    .venv/bin/python -m bench.evidence [--cases 100] [--seeds 5] [--strategies ...] [--kernels ...]

For every kernel of bench/corpus, side by side in one run:

(a) KernelBench-style ``torch.allclose(out, ref, atol=1e-2, rtol=1e-2)`` on one fixed power-of-two
    shape, contiguous inputs, 5 input seeds, ref = torch's own op in float32 on the same inputs;
(b) ``torch.testing.assert_close(out, ref.to(out.dtype))`` with its default tolerances, same inputs;
(c) gpuemu (``gpuemu.fuzz_op_in_process``, default settings: 100 cases, every dtype the kernel
    supports, non-contiguous layouts allowed) under each value distribution — regular, boundary,
    adversarial (the default), special — repeated over ``--seeds`` master seeds.

A bug kernel counts as caught by a baseline when any of its 5 input seeds fails; by gpuemu under a
strategy, per master seed, when any of the cases fails. A correct kernel flagged is a false
positive. "cases to first failure" is the index of the first failing case + 1.

Then, with the default settings (adversarial), each bug's first failure is diagnosed and minimized:
the diagnosis must name the kernel's class (``corpus.DIAGNOSIS``), and the tail-mask bugs must
minimize to one past a block boundary ("fails at N=129, passes at N=128").

Envelopes are the engine's (schemas/envelopes.json, or $GPUEMU_ENVELOPES; a fallback of 4 for an
(op, dtype) not calibrated yet): this script never sets its own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from bench import corpus
from bench.corpus import KERNELS, CorpusKernel

HERE = Path(__file__).resolve().parent

STRATEGIES = ("regular", "boundary", "adversarial", "special")
DEFAULT_STRATEGY = "adversarial"
MASTER_SEED_BASE = 20261129  # master seed i of the run is MASTER_SEED_BASE + i
BASELINE_SEEDS = (0, 1, 2, 3, 4)

# ---------------------------------------------------------------------------------------------
# (a), (b): the baselines on one fixed power-of-two shape


def _rope_ref(x: torch.Tensor, theta: float, style: str, offset: int) -> torch.Tensor:
    b, l, h, d = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = (torch.arange(l, dtype=torch.float64) + offset)[:, None] * inv[None, :]
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    t = x.double()
    x1, x2 = (t[..., 0::2], t[..., 1::2]) if style == "interleaved" else (t[..., : d // 2], t[..., d // 2 :])
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = torch.empty_like(t)
    if style == "interleaved":
        out[..., 0::2], out[..., 1::2] = o1, o2
    else:
        out[..., : d // 2], out[..., d // 2 :] = o1, o2
    return out.float()


def _attention_ref(a: Dict[str, Any]) -> torch.Tensor:
    q, k, v = a["q"].float(), a["k"].float(), a["v"].float()
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale
    if a["causal"]:
        lq, lk = s.shape[-2:]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _rows(gen: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype)


# op -> (fixed shape description, make inputs(gen, dtype) -> tensors, torch fp32 reference(args))
BASELINE_OPS: Dict[str, Tuple[str, Callable[..., Dict[str, Any]], Callable[[Dict[str, Any]], torch.Tensor]]] = {
    "softmax": ("x 4x1024", lambda g, dt: {"x": _rows(g, dt, 4, 1024)},
                lambda a: torch.softmax(a["x"].float(), dim=a["dim"])),
    "log_softmax": ("x 4x1024", lambda g, dt: {"x": _rows(g, dt, 4, 1024)},
                    lambda a: torch.log_softmax(a["x"].float(), dim=a["dim"])),
    "sum": ("x 4x1024", lambda g, dt: {"x": _rows(g, dt, 4, 1024)},
            lambda a: a["x"].float().sum(dim=a["dim"], keepdim=a["keepdim"])),
    "cumsum": ("x 4x1024", lambda g, dt: {"x": _rows(g, dt, 4, 1024)},
               lambda a: a["x"].float().cumsum(dim=a["dim"])),
    "gelu": ("x 4x1024", lambda g, dt: {"x": _rows(g, dt, 4, 1024)},
             lambda a: F.gelu(a["x"].float(), approximate=a["approximate"])),
    "layer_norm": ("x 4x1024", lambda g, dt: {"x": _rows(g, dt, 4, 1024), "weight": _rows(g, dt, 1024),
                                              "bias": _rows(g, dt, 1024)},
                   lambda a: F.layer_norm(a["x"].float(), (a["x"].shape[-1],), a["weight"].float(),
                                          a["bias"].float(), a["eps"])),
    "rms_norm": ("x 4x1024", lambda g, dt: {"x": _rows(g, dt, 4, 1024), "weight": _rows(g, dt, 1024)},
                 lambda a: a["x"].float() * torch.rsqrt(a["x"].float().pow(2).mean(-1, keepdim=True) + a["eps"])
                 * a["weight"].float()),
    "matmul": ("128x128x128", lambda g, dt: {"a": _rows(g, dt, 128, 128), "b": _rows(g, dt, 128, 128)},
               lambda a: a["a"].float() @ a["b"].float()),
    "flash_attention": ("B=1,H=4,L=128,D=64",
                        lambda g, dt: {"q": _rows(g, dt, 1, 4, 128, 64), "k": _rows(g, dt, 1, 4, 128, 64),
                                       "v": _rows(g, dt, 1, 4, 128, 64)},
                        _attention_ref),
    "cross_entropy": ("N=4,C=1024",
                      lambda g, dt: {"logits": _rows(g, dt, 4, 1024),
                                     "target": torch.randint(0, 1024, (4,), generator=g)},
                      lambda a: F.cross_entropy(a["logits"].float(), a["target"], ignore_index=a["ignore_index"],
                                                reduction=a["reduction"], label_smoothing=a["label_smoothing"])),
    "rope": ("B=1,L=128,H=4,D=64", lambda g, dt: {"x": _rows(g, dt, 1, 128, 4, 64)},
             lambda a: _rope_ref(a["x"], a["theta"], a["style"], a["offset"])),
}


def _default_attrs(op: str) -> Dict[str, Any]:
    from gpuemu import op_schema

    return {k: v.get("default") for k, v in op_schema(op).get("attrs", {}).items()}


@dataclass
class BaselineResult:
    allclose_fails: int = 0  # input seeds on which allclose(atol=rtol=1e-2) failed
    assert_close_fails: int = 0
    seeds: int = 0
    shape: str = ""
    dtype: str = ""


def run_baselines(k: CorpusKernel) -> BaselineResult:
    shape, make, ref_fn = BASELINE_OPS[k.op]
    dtype = getattr(torch, k.dtypes[0])
    res = BaselineResult(seeds=len(BASELINE_SEEDS), shape=shape, dtype=k.dtypes[0])
    for seed in BASELINE_SEEDS:
        args = make(torch.Generator().manual_seed(seed), dtype)
        args.update(_default_attrs(k.op))
        args.update(k.attrs)
        out = k.run(dict(args))
        ref = ref_fn(args)
        if not torch.allclose(out.float(), ref.float(), atol=1e-2, rtol=1e-2):
            res.allclose_fails += 1
        try:
            torch.testing.assert_close(out, ref.to(out.dtype))
        except AssertionError:
            res.assert_close_fails += 1
    return res


# ---------------------------------------------------------------------------------------------
# (c): gpuemu


@dataclass
class GpuemuRun:
    caught: bool
    first_failure: int  # cases to the first failure (index + 1); 0 when none failed
    total: int
    failed: int
    elapsed: float
    example: str = ""  # the first failure, one line


def run_gpuemu(k: CorpusKernel, strategy: str, seed: int, cases: int) -> GpuemuRun:
    # Bug kernels stop at their first failure (all that is measured); correct kernels run every case.
    r = corpus.fuzz(k, iterations=cases, value_distribution=strategy, seed=seed, fail_fast=not k.correct,
                    diagnose=False)
    example = ""
    if r.failures:
        f = r.failures[0]
        layout = ",".join(f"{n}={v}" for n, v in f.layout.items() if v != "contiguous")
        example = f"case {f.index} [{f.dtype}] {f.dims}{' ' + layout if layout else ''}: {f.message}"
    return GpuemuRun(caught=bool(r.failures), first_failure=r.first_failure + 1 if r.failures else 0,
                     total=r.total, failed=r.failed, elapsed=r.elapsed, example=example)


@dataclass
class KernelRecord:
    kernel: CorpusKernel
    baseline: Optional[BaselineResult] = None
    runs: Dict[str, List[GpuemuRun]] = field(default_factory=dict)  # strategy -> one per master seed
    minimized: Optional[Dict[str, Any]] = None


# ---------------------------------------------------------------------------------------------
# Minimizer and diagnosis under the default settings


_FAILS_AT = re.compile(r"fails at \w+=(\d+), passes at \w+=(\d+)")


def one_past_boundary(n: int, smallest_block: int = 16) -> Optional[int]:
    """The block size b >= smallest_block (a power of two) with n = j*b + 1, the largest one; None."""
    best = None
    b = smallest_block
    while b < n:
        if (n - 1) % b == 0:
            best = b
        b *= 2
    return best


def minimize_bug(k: CorpusKernel, seed: int, cases: int) -> Dict[str, Any]:
    r = corpus.fuzz(k, iterations=cases, value_distribution=DEFAULT_STRATEGY, seed=seed, fail_fast=True,
                    diagnose=True, minimize=True)
    if not r.failures:
        return {"caught": False}
    f = r.failures[0]
    mini = f.minimized or {}
    summary = str(mini.get("summary", ""))
    out: Dict[str, Any] = {"caught": True, "diagnosis": f.bug_class,
                           "diagnosis_summary": str(f.diagnosis.get("summary", "")),
                           "minimized": summary, "dims": mini.get("dims", {}),
                           "evaluations": mini.get("evaluations")}
    # "fails at R=2, passes at R=1; fails at N=1025, passes at N=1024 [...]": the largest block any
    # clause lands one past
    blocks = [one_past_boundary(int(n)) for n, p in _FAILS_AT.findall(summary) if int(p) == int(n) - 1]
    blocks = [b for b in blocks if b]
    if blocks:
        out["boundary"] = max(blocks)
    return out


# ---------------------------------------------------------------------------------------------
# Tables


def _median(xs: Sequence[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def _fmt_med(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*headers), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows])


def aggregate(records: List[KernelRecord], strategies: Sequence[str], n_seeds: int, markdown: bool) -> str:
    bugs = [r for r in records if not r.kernel.correct]
    goods = [r for r in records if r.kernel.correct]
    rows = []
    if all(r.baseline for r in records):
        for label, attr in (("allclose(atol=rtol=1e-2), 1 shape, 5 seeds", "allclose_fails"),
                            ("assert_close defaults, 1 shape, 5 seeds", "assert_close_fails")):
            caught = sum(getattr(r.baseline, attr) > 0 for r in bugs)
            fps = sum(getattr(r.baseline, attr) > 0 for r in goods)
            rows.append([label, f"{caught}/{len(bugs)}", "-", f"{fps}/{len(goods)}", "-", "-"])
    for s in strategies:
        every = sum(all(x.caught for x in r.runs[s]) for r in bugs)
        detections = sum(x.caught for r in bugs for x in r.runs[s])
        fps = sum(any(x.caught for x in r.runs[s]) for r in goods)
        fp_runs = sum(x.caught for r in goods for x in r.runs[s])
        firsts = [x.first_failure for r in bugs for x in r.runs[s] if x.caught]
        label = f"gpuemu {s}{' (default)' if s == DEFAULT_STRATEGY else ''}, {n_seeds} master seeds"
        rows.append([label, f"{every}/{len(bugs)}", f"{detections}/{len(bugs) * n_seeds}",
                     f"{fps}/{len(goods)}", f"{fp_runs}/{len(goods) * n_seeds}", _fmt_med(_median(firsts))])
    headers = ["method", "bugs caught (every seed)", "bug runs caught", "correct flagged",
               "correct runs flagged", "median cases to 1st failure"]
    return _table(headers, rows, markdown)


def per_kernel(records: List[KernelRecord], strategies: Sequence[str], n_seeds: int, markdown: bool) -> str:
    headers = ["kernel", "op", "bug", "allclose", "assert_close"] + [s for s in strategies]
    rows = []
    for r in records:
        k = r.kernel
        b = r.baseline
        cells = [k.name, k.op, k.bug or "(correct)",
                 f"{b.allclose_fails}/{b.seeds}" if b else "-", f"{b.assert_close_fails}/{b.seeds}" if b else "-"]
        for s in strategies:
            runs = r.runs[s]
            caught = sum(x.caught for x in runs)
            if k.correct:
                cells.append(f"{caught}/{len(runs)} FP" if caught else f"ok {len(runs)}x{runs[0].total}")
            else:
                med = _median([x.first_failure for x in runs if x.caught])
                cells.append(f"{caught}/{len(runs)} @{_fmt_med(med)}")
        rows.append(cells)
    legend = ("allclose / assert_close: failing input seeds out of 5 (a bug needs >= 1 to be caught; a correct "
              "kernel should have 0). gpuemu bug cells: master seeds that caught it / seeds, @ median cases to the "
              "first failure. Correct cells: 'ok SxN' = S seeds x N cases, none flagged.")
    return _table(headers, rows, markdown) + ("\n\n" if markdown else "\n") + legend


def minimizer_table(records: List[KernelRecord], markdown: bool) -> str:
    headers = ["bug kernel", "declared class", "diagnosis (engine)", "minimized", "one past a block of"]
    rows = []
    for r in records:
        m = r.minimized
        if m is None:
            continue
        if not m.get("caught"):
            rows.append([r.kernel.name, r.kernel.bug or "", "(not caught)", "-", "-"])
            continue
        boundary = m.get("boundary")
        diagnosis = m.get("diagnosis", "")
        if r.kernel.diagnosis is not None and diagnosis != r.kernel.diagnosis:
            diagnosis += f" (want {r.kernel.diagnosis})"
        rows.append([r.kernel.name, r.kernel.bug or "", diagnosis, m.get("minimized", "") or "-",
                     str(boundary) if boundary else "-"])
    return _table(headers, rows, markdown)


def envelope_source() -> str:
    path = os.environ.get("GPUEMU_ENVELOPES") or str(HERE.parent / "schemas" / "envelopes.json")
    if not Path(path).exists():
        return f"fallback envelope 4 for every (op, dtype) ({path} not present)"
    try:
        data = json.loads(Path(path).read_text())
        env = data.get("envelopes", data)
        n = sum(len(v) for v in env.values() if isinstance(v, dict))
        return f"{path} ({n} calibrated (op, dtype) entries; fallback 4 for the rest)"
    except (OSError, ValueError, AttributeError):
        return f"{path} (unreadable here; the engine reports its own error)"


# ---------------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100, help="cases per gpuemu run (default 100, the default)")
    ap.add_argument("--seeds", type=int, default=5, help="master seeds per strategy (default 5)")
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    ap.add_argument("--kernels", nargs="+", default=None, help="corpus kernel names (default: all)")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ap.add_argument("--json", type=Path, default=None, help="also write every measurement here")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: on a shared 2-core machine more threads spin-wait)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    kernels = KERNELS if not args.kernels else [corpus.BY_NAME[n] for n in args.kernels]
    seeds = [MASTER_SEED_BASE + i for i in range(args.seeds)]
    records = [KernelRecord(k) for k in kernels]
    started = time.perf_counter()
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    for rec in records:
        k = rec.kernel
        t0 = time.perf_counter()
        if not args.no_baselines:
            rec.baseline = run_baselines(k)
        for s in args.strategies:
            rec.runs[s] = [run_gpuemu(k, s, seed, args.cases) for seed in seeds]
        if not k.correct and not args.no_minimize:
            rec.minimized = minimize_bug(k, seeds[0], args.cases)
        flags = " ".join(f"{s}:{sum(x.caught for x in rec.runs[s])}" for s in args.strategies)
        log(f"[{time.perf_counter() - started:7.1f}s] {k.name:30s} {flags}  ({time.perf_counter() - t0:.1f}s)")
        for s in args.strategies:
            for x in rec.runs[s]:
                if k.correct and x.caught:
                    log(f"    FALSE POSITIVE {s}: {x.example}")

    md = args.markdown
    print(f"gpuemu evidence: {len([r for r in records if not r.kernel.correct])} bug kernels, "
          f"{len([r for r in records if r.kernel.correct])} correct kernels; gpuemu {args.cases} cases per run, "
          f"master seeds {seeds[0]}..{seeds[-1]}; envelopes: {envelope_source()}")
    print()
    print(aggregate(records, args.strategies, len(seeds), md))
    print()
    print(per_kernel(records, args.strategies, len(seeds), md))
    if any(r.minimized for r in records):
        print()
        print(f"Minimizer and diagnosis, default settings ({DEFAULT_STRATEGY}, master seed {seeds[0]}):")
        print()
        print(minimizer_table(records, md))
    print()
    print(f"total {time.perf_counter() - started:.0f}s")

    if args.json:
        payload = []
        for r in records:
            payload.append({
                "kernel": r.kernel.name, "op": r.kernel.op, "bug": r.kernel.bug,
                "baseline": r.baseline.__dict__ if r.baseline else None,
                "gpuemu": {s: [x.__dict__ for x in runs] for s, runs in r.runs.items()},
                "minimized": r.minimized,
            })
        args.json.write_text(json.dumps({"seeds": seeds, "cases": args.cases, "kernels": payload}, indent=1))

    # Exit status: the bar of issue 3 under the default strategy.
    bad = []
    if DEFAULT_STRATEGY in args.strategies:
        for r in records:
            runs = r.runs[DEFAULT_STRATEGY]
            if r.kernel.correct and any(x.caught for x in runs):
                bad.append(f"{r.kernel.name}: false positive")
            if not r.kernel.correct and not all(x.caught for x in runs):
                bad.append(f"{r.kernel.name}: missed under some master seed")
        firsts = [x.first_failure for r in records if not r.kernel.correct for x in r.runs[DEFAULT_STRATEGY]
                  if x.caught]
        if firsts and statistics.median(firsts) > 3:
            bad.append(f"median cases to first failure {statistics.median(firsts)} > 3")
    for r in records:
        if r.kernel.bug == "tail_mask" and r.minimized and not r.minimized.get("boundary"):
            bad.append(f"{r.kernel.name}: minimized to {r.minimized.get('minimized')!r}, not one past a block")
        if (r.minimized and r.minimized.get("caught") and r.kernel.diagnosis is not None
                and r.minimized.get("diagnosis") != r.kernel.diagnosis):
            bad.append(f"{r.kernel.name}: diagnosed {r.minimized.get('diagnosis')!r}, not {r.kernel.diagnosis!r}")
    for b in bad:
        print(f"BAR NOT MET: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
