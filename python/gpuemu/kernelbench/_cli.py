"""``gpuemu kernelbench``: judge KernelBench candidates (docs/kernelbench.md).

    gpuemu kernelbench PROBLEM.py CANDIDATE.py [--dtype D ...] [--cases N] [--json]
    gpuemu kernelbench PROBLEM.py CANDIDATES_DIR/ ...      every candidate of one problem
    gpuemu kernelbench PROBLEMS_DIR/ CANDIDATES_DIR/ ...   every problem's candidates: one JSON line a pair

Exit status, as ``gpuemu fuzz``'s: 0 every pair passed (inconclusive cases are reported, they do not
fail it), 1 a pair failed, 2 bad input (a problem or candidate that does not load, a bad flag).
In a directory run every pair is judged whatever the others did, and a pair that cannot be judged
is a JSON line with ``"verdict": "error"``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

from ..errors import ValidationError
from ._judge import KERNELBENCH_SEED, TORCH_DTYPES, PairResult, ProblemOp, judge_candidate
from ._load import _tail, load_candidate, load_problem


def pairs_of(problem: Path, candidates: Path) -> Iterator[Tuple[Path, List[Path]]]:
    """(problem file, its candidate files). A directory of problems pairs each problem ``P.py``
    with ``CANDIDATES/P/*.py`` and ``CANDIDATES/P_*.py`` (and ``P.py`` itself there)."""
    if problem.is_file():
        if candidates.is_dir():
            yield problem, sorted(p for p in candidates.glob("*.py") if p.is_file())
        else:
            yield problem, [candidates]
        return
    if not problem.is_dir():
        raise ValidationError(f"{problem}: no such file or directory")
    if not candidates.is_dir():
        raise ValidationError(f"{candidates}: a directory of problems is judged against a directory of candidates")
    for p in sorted(problem.glob("*.py")):
        found = []
        sub = candidates / p.stem
        if sub.is_dir():
            found += sorted(sub.glob("*.py"))
        found += sorted(c for c in candidates.glob(f"{p.stem}_*.py") if c.is_file())
        if (candidates / p.name).is_file():
            found.append(candidates / p.name)
        if found:
            yield p, found


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="gpuemu kernelbench",
                                 description="Judge KernelBench candidates (ModelNew) against their problems (Model).")
    ap.add_argument("problem", help="a problem file, or a directory of them")
    ap.add_argument("candidate", help="a candidate file, or a directory of them")
    ap.add_argument("--dtype", action="append", default=None, choices=sorted(TORCH_DTYPES),
                    help="the precision the models run in (repeatable; default float32)")
    ap.add_argument("--cases", type=int, default=100, help="cases per pair (default 100)")
    ap.add_argument("--seed", type=int, default=KERNELBENCH_SEED, help="the master seed of the cases (default 42)")
    ap.add_argument("--init-seed", type=int, default=KERNELBENCH_SEED,
                    help="the seed Model and ModelNew are built under, as KernelBench builds them (default 42)")
    ap.add_argument("--strategy", default="adversarial", choices=["regular", "boundary", "adversarial", "special"])
    ap.add_argument("--json", action="store_true", help="JSON: one object (one line per pair for directories)")
    ap.add_argument("--deterministic", action="store_true",
                    help="also require bitwise-identical results from two calls on the same inputs")
    ap.add_argument("--no-sentinel", action="store_true", help="do not fill fresh allocations with NaN")
    ap.add_argument("--fused", action="store_true",
                    help="the candidates keep every intermediate in fp32 (one fused kernel): rounding each op's "
                         "result to the dtype, as PyTorch's unfused code does in 16 bits, is not admitted")
    ap.add_argument("--allow", action="append", default=[], metavar="OP",
                    help="an aten op the candidate may call although the reference does (aten.convolution)")
    ap.add_argument("--forbid", action="append", default=None, metavar="OP",
                    help="the ops the candidate may not call (replaces the default: the reference's own)")
    ap.add_argument("--max-elements", type=int, default=None, help="the per-case budget of input elements")
    ap.add_argument("--device", default="cpu", help="where the candidates run: cpu (default) or cuda")
    try:
        a = ap.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    if a.cases < 1:
        print("gpuemu kernelbench: --cases must be at least 1", file=sys.stderr)
        return 2
    dtypes = a.dtype or ["float32"]
    problem, candidate = Path(a.problem), Path(a.candidate)
    try:
        plan = list(pairs_of(problem, candidate))
    except ValidationError as exc:
        print(f"gpuemu kernelbench: {exc}", file=sys.stderr)
        return 2
    directory = problem.is_dir() or candidate.is_dir()
    if not plan or not any(c for _, c in plan):
        print(f"gpuemu kernelbench: no candidates for {problem} in {candidate}", file=sys.stderr)
        return 2
    results: List[PairResult] = []
    t0 = time.perf_counter()
    for pfile, cands in plan:
        for dt in dtypes:
            for r in _judge_problem(pfile, cands, dt, a):
                results.append(r)
                if directory:
                    print(json.dumps(r.to_json(), sort_keys=True), flush=True)
    if not directory:
        r = results[0]
        print(json.dumps(r.to_json(), indent=1, sort_keys=True) if a.json else r.summary())
    else:
        counts = {v: sum(1 for r in results if r.verdict == v) for v in ("passed", "failed", "inconclusive", "error")}
        print(f"gpuemu kernelbench: {len(results)} pairs in {time.perf_counter() - t0:.1f} s: "
              + ", ".join(f"{n} {v}" for v, n in counts.items()), file=sys.stderr)
    if any(r.verdict == "error" for r in results):
        return 2
    return 1 if any(r.verdict == "failed" for r in results) else 0


def _judge_problem(pfile: Path, cands: List[Path], dtype: str, a: argparse.Namespace) -> Iterator[PairResult]:
    """Every candidate of one problem in one dtype, on cases whose references are made once."""
    try:
        problem = load_problem(pfile)
        pop = ProblemOp(problem, dtype, seed=a.seed, cases=a.cases, strategy=a.strategy,
                        forbid=set(a.forbid) if a.forbid is not None else None, allow=a.allow,
                        max_elements=a.max_elements, device=a.device, init_seed=a.init_seed, fused=a.fused)
    except ValidationError as exc:
        for c in cands:
            yield PairResult(problem=pfile.stem, candidate=c.stem, dtype=dtype, seed=a.seed,
                             problem_file=str(pfile), candidate_file=str(c), error=str(exc))
        return
    for c in cands:
        try:
            cand = load_candidate(c)
        except ValidationError as exc:
            yield PairResult(problem=pfile.stem, candidate=c.stem, dtype=dtype, seed=a.seed,
                             problem_file=str(pfile), candidate_file=str(c), error=str(exc))
            continue
        try:
            yield judge_candidate(pop, cand, a.cases, deterministic=a.deterministic, sentinel=not a.no_sentinel)
        except (Exception, SystemExit) as exc:  # a candidate that breaks the judge is one bad pair, not the batch
            yield PairResult(problem=pfile.stem, candidate=c.stem, dtype=dtype, seed=a.seed, problem_file=str(pfile),
                             candidate_file=str(c), error=f"judging stopped: {type(exc).__name__}: {exc}\n"
                                                        f"{_tail(traceback.format_exc())}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
