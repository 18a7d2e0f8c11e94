#!/usr/bin/env python3
"""Detection power at the margin (issue 21): the smallest precision loss gpuemu catches, per op and dtype.

    .venv/bin/python -m bench.power.power_curve --out power-results            # every op x dtype, 20 seeds x 100 cases
    .venv/bin/python -m bench.power.power_curve --ops softmax sum --dtypes bfloat16 --seeds 2 --cases 20
    .venv/bin/python -m bench.power.power_curve --from-runs a/runs.jsonl b/runs.jsonl --out merged

For each op x dtype, its mutable control (bench/power/mutants_*.py: a correct fp32 implementation
with named mutation sites) is run on the cases of ``--seeds`` master seeds (``--cases`` each, drawn
as ``gpuemu fuzz`` draws them: ``--strategy`` values, layouts on, the attrs with schema values
varied, the shipped envelopes), once per case for the whole k grid (rounding.py: the sites'
intermediates rounded to 23 - log2(k) mantissa bits; k = 1 is the control itself), and every k is
judged against one fp64 reference. Reported per op x dtype: the control's worst normalised error,
the smallest k from which every larger k of the grid fails >= 95% of the runs, the mutant's worst
error there, and their ratio (the detection margin); per k the share of runs caught and the
worst error (the curve). ``--out DIR`` writes DIR/runs.jsonl (every run, every case's error at
every k), DIR/power_curve.json, DIR/power_curve.md and DIR/power_curve.svg. With ``--resume`` runs
already in DIR/runs.jsonl are not measured again.

Exit status 1 when the harness raised on a case or a control (k = 1) failed a case.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.power.report import markdown, curve_markdown, margin_flag, per_run_flag, summarize
from bench.power.rounding import default_grid, log2_of

MASTER_SEED_BASE = 20261201  # master seed i is MASTER_SEED_BASE + i (the Conformance sweep's)
REPRESENTATIVE = ("softmax", "log_softmax", "layer_norm", "rms_norm", "matmul", "sum", "cumsum",
                  "flash_attention", "gelu", "cross_entropy")

BIG_OPS = ("flash_attention", "decode_attention", "conv2d", "conv1d", "matmul", "bmm", "linear", "cumsum",
           "layer_norm", "group_norm")

Job = Tuple[str, str, int, int, Tuple[int, ...], Optional[Tuple[str, ...]], str]


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)


_ENGINE = None


def _run(job: Job) -> Dict[str, Any]:
    global _ENGINE
    import gpuemu
    from bench.power.measure import measure_run

    if _ENGINE is None:
        _ENGINE = gpuemu._core.Engine()
    op, dtype, seed, cases, ks, sites, strategy = job
    return measure_run(op, dtype, seed, cases, ks, sites, strategy, engine=_ENGINE)


def plan(ops: Sequence[str], dtypes: Optional[Sequence[str]], seeds: Sequence[int], cases: int, ks: Sequence[int],
         sites: Optional[Sequence[str]], strategy: str) -> List[Job]:
    """One job per op x dtype x master seed (seed i is MASTER_SEED_BASE + i)."""
    from gpuemu import op_schema

    jobs: List[Job] = []
    for op in ops:
        for dt in op_schema(op)["dtypes"]:
            if dtypes and dt not in dtypes:
                continue
            for s in seeds:
                jobs.append((op, dt, MASTER_SEED_BASE + s, cases, tuple(ks), tuple(sites) if sites else None, strategy))
    return jobs


def _window(entry: Dict[str, Any], ks: Sequence[int], half_width: int) -> Tuple[int, ...]:
    """The k measured on the seeds after the scouts: 1 and the ``half_width`` grid steps on either
    side of the scouts' smallest caught k (the top of the grid when they caught none)."""
    grid = sorted(ks)
    at = grid.index(entry["k_star"]) if entry["k_star"] is not None else len(grid) - 1
    return tuple(sorted({1} | set(grid[max(0, at - half_width): at + half_width + 1])))


class _NoSink:
    def __enter__(self) -> "_NoSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def write(self, _s: str) -> None:
        return None

    def flush(self) -> None:
        return None


def _measure(pool: Any, jobs: List[Job], runs: List[Dict[str, Any]], sink: Any, cases: int, t0: float) -> None:
    """Runs the jobs not already in ``runs`` (a resumed file), appending each to runs and sink."""
    done = {_run_key(r) for r in runs}
    jobs = [j for j in jobs if _key(*j) not in done]
    # big ops first, so that the pool's tail is short
    jobs.sort(key=lambda j: j[0] not in BIG_OPS)
    print(f"power curve: {len(jobs)} runs of {cases} cases", file=sys.stderr)
    futures = {pool.submit(_run, j): j for j in jobs}
    for n, fut in enumerate(as_completed(futures), 1):
        try:
            run = fut.result()
        except BrokenProcessPool:  # a worker died (out of memory?): say which run, resume later
            raise SystemExit(f"a worker died running {futures[fut][:3]}; the runs finished so far are kept "
                             "(--resume measures the rest)")
        run["cases_asked"] = cases
        runs.append(run)
        sink.write(json.dumps(run) + "\n")
        sink.flush()
        for p in run["problems"][:1]:
            print(f"HARNESS ERROR {run['op']} {run['dtype']} seed {run['seed']}: {p}", file=sys.stderr)
        if n % 10 == 0 or n == len(jobs):
            print(f"  {n}/{len(jobs)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def _key(op: str, dtype: str, seed: int, cases: int, ks: Sequence[int], sites: Optional[Sequence[str]],
         strategy: str) -> str:
    return json.dumps([op, dtype, seed, cases, list(ks), sorted(sites) if sites else None, strategy])


def _run_key(r: Dict[str, Any]) -> str:
    from bench.power.mutants import KERNELS

    sites = None if sorted(r["sites"]) == sorted(KERNELS[r["op"]].sites) else r["sites"]
    return _key(r["op"], r["dtype"], r["seed"], r["cases_asked"], r["ks"], sites, r["strategy"])


def _load_runs(paths: Sequence[str]) -> List[Dict[str, Any]]:
    runs = []
    for p in paths:
        with open(p) as f:
            runs.extend(json.loads(line) for line in f if line.strip())
    return runs


def _parse_k(values: Optional[Sequence[str]]) -> Tuple[int, ...]:
    if not values:
        return default_grid()
    ks = sorted({int(v) for v in values} | {1})
    for k in ks:
        log2_of(k)
    return tuple(ks)


LEGEND = """Errors are normalised as the verdicts normalise them (the case fails above the envelope). \
*control worst*: the unmutated control's worst error over every case. *smallest k caught*: the \
smallest k of the grid from which every larger k fails >= 95% of the runs. *margin* (pooled): the \
mutant's worst error at that k over the control's worst, both over all the runs' cases; *ratio at \
k/2*: the same for the k just below, which escaped. *margin per run*: each (run, k > 1) is one \
kernel judged on one run's 100 cases, r = its worst error there over the control's worst on the very \
same cases; the margin is the smallest r above which >= 95% of such pairs failed their run (inf: a \
pair at the top escaped); *runs >= 4x caught*: of the pairs with r >= 4, how many failed. The goal \
(issue 21) is a margin of 4 or less."""


def write_outputs(out: Path, entries: List[Dict[str, Any]], meta: Dict[str, Any]) -> None:
    from bench.power.svg_plot import render

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "power_curve.json", "w") as f:
        json.dump({"meta": meta, "entries": entries}, f, indent=1, default=lambda x: None)
        f.write("\n")
    with open(out / "power_curve.md", "w") as f:
        f.write(f"Command: `{meta['command']}`\n\n{LEGEND}\n\n{markdown(entries)}\n\n"
                "The mutant's worst error at each k (* caught in >= 95% of runs):\n\n"
                f"{curve_markdown(entries)}\n")
    with open(out / "power_curve.svg", "w") as f:
        f.write(render(entries, f"gpuemu detection power: worst normalised error of the k-mutant "
                                f"({meta['describe']})"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="*", help="only these ops (default: every op with a mutable control); "
                    "'representative' names issue 21's subset")
    ap.add_argument("--dtypes", nargs="*", help="only these dtypes (default: each op's schema dtypes)")
    ap.add_argument("--seeds", type=int, default=20, help="master seeds per op x dtype (default 20)")
    ap.add_argument("--cases", type=int, default=100, help="cases per run (default 100)")
    ap.add_argument("--k", nargs="*", help="the k grid, powers of two (default 1, 2, ..., 2^20; 1 is always added)")
    ap.add_argument("--sites", nargs="*", help="mutate only these sites (default: every site of the op)")
    ap.add_argument("--strategy", default="adversarial", choices=("regular", "boundary", "adversarial", "special"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--scout-seeds", type=int, default=0,
                    help="measure the full grid on this many seeds only, and on the others only the window "
                         "around the smallest k they caught (default 0: the full grid on every seed)")
    ap.add_argument("--window", type=int, default=2, help="grid steps on either side of the scouted k (default 2)")
    ap.add_argument("--out", help="write runs.jsonl, power_curve.json, .md and .svg here")
    ap.add_argument("--resume", action="store_true", help="skip the runs already in OUT/runs.jsonl")
    ap.add_argument("--from-runs", nargs="*", help="only summarise these runs.jsonl files (no measuring)")
    a = ap.parse_args(argv)

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from bench.power.mutants import KERNELS

    ks = _parse_k(a.k)
    ops = list(REPRESENTATIVE) if a.ops == ["representative"] else (a.ops or sorted(KERNELS))
    unknown = [o for o in ops if o not in KERNELS]
    if unknown:
        ap.error(f"no mutable control for {', '.join(unknown)}")
    out = Path(a.out) if a.out else None
    command = "python -m bench.power.power_curve " + " ".join(argv if argv is not None else sys.argv[1:])
    runs: List[Dict[str, Any]] = []
    t0 = time.perf_counter()
    if a.from_runs:
        runs = _load_runs(a.from_runs)
    else:
        runs_path = out / "runs.jsonl" if out else None
        if runs_path and a.resume and runs_path.exists():
            runs = _load_runs([str(runs_path)])
        if out:
            out.mkdir(parents=True, exist_ok=True)
        scout = min(a.scout_seeds, a.seeds) if a.scout_seeds else a.seeds
        with open(runs_path, "a") if runs_path else _NoSink() as sink, \
                ProcessPoolExecutor(max(1, a.jobs), mp_context=mp.get_context("spawn"), initializer=_worker_init) as pool:
            _measure(pool, plan(ops, a.dtypes, range(scout), a.cases, ks, a.sites, a.strategy), runs, sink,
                     a.cases, t0)
            if scout < a.seeds:  # the other seeds: only the window around what the scouts caught
                rest: List[Job] = []
                for e in summarize(runs):
                    if (e["op"] in ops and (not a.dtypes or e["dtype"] in a.dtypes)
                            and e["sites"] == sorted(a.sites or KERNELS[e["op"]].sites)):
                        rest += plan([e["op"]], [e["dtype"]], range(scout, a.seeds), a.cases, _window(e, ks, a.window),
                                     a.sites, a.strategy)
                _measure(pool, rest, runs, sink, a.cases, t0)
    entries = summarize(runs)
    print(markdown(entries))
    flagged = [e for e in entries if margin_flag(e)]
    if flagged:
        print("\nop x dtype missing the goal (margin <= 4): " +
              ", ".join(f"{e['op']} {e['dtype']} ({margin_flag(e)})" for e in flagged))
    flagged_run = [e for e in entries if per_run_flag(e)]
    if flagged_run:
        print("\nop x dtype missing the goal read run by run (margin per run <= 4): " +
              ", ".join(f"{e['op']} {e['dtype']} ({per_run_flag(e)}: {e['margin_per_run']:.3g})" for e in flagged_run))
    seeds = sorted({s for e in entries for s in e["seeds"]})
    meta = {"command": command, "grid": sorted({c["k"] for e in entries for c in e["curve"]}),
            "master_seeds": seeds, "seconds": round(time.perf_counter() - t0, 1),
            "describe": f"{len(seeds)} master seeds, adversarial, k = 2^0..2^{int(math.log2(max(ks)))}"}
    if out:
        write_outputs(out, entries, meta)
    problems = sum(len(e["problems"]) for e in entries)
    control_failed = [e for e in entries if e["control_failed_cases"]]
    print(f"\n{sum(e['cases'] for e in entries)} cases judged, {problems} harness errors, "
          f"{len(control_failed)} op x dtype whose control failed a case, {meta['seconds']:.0f} s", file=sys.stderr)
    return 1 if problems or control_failed else 0


if __name__ == "__main__":
    sys.exit(main())
