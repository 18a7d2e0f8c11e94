#!/usr/bin/env python3
"""100 candidates of one problem: gpuemu's judge against KernelBench's own check, in the same run.

    .venv/bin/python -m bench.kernelbench.speed --problem 11_softmax_rows --candidates 100 --cases 8 16 32

The candidates are the problem's own (bench/kernelbench/candidates/<problem>/), cycled to
``--candidates`` files in a temporary directory (each loaded as its own module, as a leaderboard's
submissions are). KernelBench's check (measure.kernelbench_check: 5 trials at the problem's one
shape, allclose) runs on every candidate; gpuemu builds the problem's op and its cases' references
once (``ProblemOp``: the shared reference) and judges every candidate on them, for each
``--cases``. Printed: seconds for each, and gpuemu's time over KernelBench's (the goal: <= 2).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.kernelbench.measure import kernelbench_check

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    from gpuemu.kernelbench import ProblemOp, judge_candidate, load_candidate, load_problem

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", default="11_softmax_rows")
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--cases", type=int, nargs="*", default=[8, 16, 32])
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    problem = load_problem(HERE / "problems" / f"{a.problem}.py")
    sources = sorted((HERE / "candidates" / a.problem).glob("*.py"))
    tmp = Path(tempfile.mkdtemp(prefix="gpuemu-kb-speed-"))
    try:
        files = []
        for k in range(a.candidates):
            dst = tmp / f"c{k:03d}_{sources[k % len(sources)].name}"
            shutil.copy(sources[k % len(sources)], dst)
            files.append(dst)
        cands = [load_candidate(f) for f in files]
        t = time.perf_counter()
        kb = [kernelbench_check(problem, c, a.dtype) for c in cands]
        kb_s = time.perf_counter() - t
        print(f"{a.problem} [{a.dtype}], {len(cands)} candidates: KernelBench's check {kb_s:.2f} s "
              f"({sum(1 for r in kb if r['passed'])} passed)")
        for n in a.cases:
            t = time.perf_counter()
            pop = ProblemOp(problem, a.dtype, cases=n)
            ref_s = time.perf_counter() - t
            verdicts = [judge_candidate(pop, c, n, diagnose=False).verdict for c in cands]
            g_s = time.perf_counter() - t
            print(f"  gpuemu --cases {n}: {g_s:.2f} s (the references, once: {ref_s:.2f} s; "
                  f"{verdicts.count('passed')} passed), {g_s / kb_s:.2f}x KernelBench's check")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
