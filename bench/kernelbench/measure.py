#!/usr/bin/env python3
"""The KernelBench-format corpus judged three ways, side by side (issue 43's goals).

    .venv/bin/python -m bench.kernelbench.measure --seeds 5 --cases 50 --out evidence/kernelbench/corpus
    .venv/bin/python -m bench.kernelbench.measure --problems 01_relu --seeds 1 --cases 12

For every problem of bench/kernelbench/problems and every candidate of
bench/kernelbench/candidates/<problem>/ (its ``EXPECT``, ``BUG`` and ``DTYPES``: README.md), in each
dtype:

- **gpuemu**: ``gpuemu.kernelbench`` (fuzzed shapes, layouts and adversarial values; the derived
  error bound; the reward-hack verdicts), ``--cases`` cases under each of ``--seeds`` master seeds
  (20261201 + i), the problem's references made once per seed and shared by its candidates;
- **KernelBench's check**, as KernelBench's eval does it (our code, same semantics): both models
  built after ``torch.manual_seed(42)``, 5 trials whose seeds come from ``torch.manual_seed(42)``,
  each ``get_inputs()`` at the problem's one shape cast to the dtype, an output shape check, then
  ``torch.allclose(atol=rtol=1e-4)`` in float32, ``1e-2`` in 16-bit dtypes;
- **a robust-kbench-style check**: several input settings at the problem's shape (``get_inputs()`` as
  it is, scaled by 100, shifted by 5, and as N(0, 1) draws), one global tolerance
  (``allclose(atol=rtol=1e-2)``), every setting must pass.

A candidate "passes" a check when every case / trial / setting passes (gpuemu: its verdict is
passed or inconclusive). Results: each pair's verdicts per seed (runs.jsonl), and the table of
false positives (correct candidates failed) and catches (buggy candidates failed) per check.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

HERE = Path(__file__).resolve().parent
MASTER_SEED_BASE = 20261201
TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
TDT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def candidate_meta(path: Path) -> Dict[str, Any]:
    spec = importlib.util.spec_from_file_location(f"kbmeta_{path.parent.name}_{path.stem}", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"expect": getattr(mod, "EXPECT", "pass"), "bug": getattr(mod, "BUG", None),
            "dtypes": tuple(getattr(mod, "DTYPES", ("float32", "bfloat16")))}


def _cast(xs: Sequence[Any], dt: torch.dtype) -> List[Any]:
    return [x.to(dt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]


def _build(problem, cand, dt):
    torch.manual_seed(42)
    init = list(problem.get_init_inputs())
    torch.manual_seed(42)
    model = problem.Model(*init).to(dt)
    torch.manual_seed(42)
    new = cand.ModelNew(*init).to(dt)
    return model, new


def kernelbench_check(problem, cand, dtype: str, trials: int = 5) -> Dict[str, Any]:
    """KernelBench's correctness check (eval.run_and_check_correctness' semantics)."""
    dt = TDT[dtype]
    try:
        model, new = _build(problem, cand, dt)
        torch.manual_seed(42)
        seeds = [torch.randint(0, 2 ** 32 - 1, (1,)).item() for _ in range(trials)]
        with torch.no_grad():
            for s in seeds:
                torch.manual_seed(s)
                inputs = _cast(problem.get_inputs(), dt)
                torch.manual_seed(s)
                ref = model(*inputs)
                torch.manual_seed(s)
                out = new(*inputs)
                if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
                    return {"passed": False, "why": "shape mismatch"}
                if not torch.allclose(ref.float(), out.float(), atol=TOL[dtype], rtol=TOL[dtype]):
                    return {"passed": False, "why": "allclose"}
    except Exception as exc:
        return {"passed": False, "why": f"{type(exc).__name__}: {str(exc)[:120]}"}
    return {"passed": True}


def robust_check(problem, cand, dtype: str) -> Dict[str, Any]:
    """Several input settings at the problem's shape, one global tolerance (1e-2)."""
    dt = TDT[dtype]
    try:
        model, new = _build(problem, cand, dt)
        torch.manual_seed(7)
        base = problem.get_inputs()
        settings = {
            "as drawn": base,
            "scaled x100": [x * 100 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in base],
            "shifted +5": [x + 5 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in base],
            "normal": [torch.randn_like(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in base],
        }
        with torch.no_grad():
            for name, xs in settings.items():
                inputs = _cast(xs, dt)
                ref = model(*inputs)
                out = new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
                    return {"passed": False, "why": f"{name}: shape mismatch"}
                if not torch.allclose(ref.float(), out.float(), atol=1e-2, rtol=1e-2, equal_nan=True):
                    return {"passed": False, "why": f"{name}: allclose"}
    except Exception as exc:
        return {"passed": False, "why": f"{type(exc).__name__}: {str(exc)[:120]}"}
    return {"passed": True}


def measure_problem(job) -> Dict[str, Any]:
    """Every candidate of one problem, in every dtype and under every seed (one worker's share)."""
    from gpuemu.kernelbench import ProblemOp, judge_candidate, load_candidate, load_problem

    root, stem, dtypes, seeds, cases = job
    torch.set_num_threads(1)
    root = Path(root)
    pfile = root / "problems" / f"{stem}.py"
    rows: List[Dict[str, Any]] = []
    log: List[str] = []
    timing = {"gpuemu_s": 0.0, "kernelbench_s": 0.0, "robust_s": 0.0}
    problem = load_problem(pfile)
    cands = sorted((root / "candidates" / stem).glob("*.py"))
    metas = {c: candidate_meta(c) for c in cands}
    loaded = {c: load_candidate(c) for c in cands}
    for dt in dtypes:
        baseline = {}
        for c in cands:
            if dt not in metas[c]["dtypes"]:
                continue
            t = time.perf_counter()
            kb = kernelbench_check(problem, loaded[c], dt)
            timing["kernelbench_s"] += time.perf_counter() - t
            t = time.perf_counter()
            rb = robust_check(problem, loaded[c], dt)
            timing["robust_s"] += time.perf_counter() - t
            baseline[c] = (kb, rb)
        for s in range(seeds):
            t = time.perf_counter()
            try:
                pop = ProblemOp(problem, dt, seed=MASTER_SEED_BASE + s, cases=cases)
            except Exception as exc:
                log.append(f"PROBLEM ERROR {stem} {dt}: {exc}")
                for c in baseline:
                    rows.append({"problem": stem, "candidate": c.stem, "dtype": dt, "seed": s, **metas[c],
                                 "gpuemu": "error", "classes": [], "kernelbench": baseline[c][0]["passed"],
                                 "robust": baseline[c][1]["passed"], "error": str(exc)[:300]})
                continue
            for c, (kb, rb) in baseline.items():
                try:
                    r = judge_candidate(pop, loaded[c], cases, diagnose=False)
                    verdict, classes, err, first = r.verdict, r.failure_classes, r.error, r.first_failure
                    counts = {"cases": r.cases, "passed": r.passed, "failed": r.failed, "inconclusive": r.inconclusive}
                except Exception as exc:
                    verdict, classes, err, first = "error", [], f"{type(exc).__name__}: {exc}", None
                    counts = None
                row = {"problem": stem, "candidate": c.stem, "dtype": dt, "seed": s, **metas[c],
                       "gpuemu": verdict, "classes": classes, "kernelbench": kb["passed"],
                       "kernelbench_why": kb.get("why"), "robust": rb["passed"], "robust_why": rb.get("why")}
                if counts:
                    row["case_counts"] = counts
                if err:
                    row["error"] = err[:300]
                if verdict == "failed" and first:
                    row["first_failure"] = {k: first.get(k) for k in ("index", "dims", "class", "message")}
                rows.append(row)
                ok = verdict in ("passed", "inconclusive")
                if ok != (metas[c]["expect"] == "pass"):
                    what = "FALSE POSITIVE" if metas[c]["expect"] == "pass" else "MISSED"
                    log.append(f"{what} {stem}/{c.stem} [{dt}] seed {s}: {verdict} {classes} "
                               f"{(row.get('first_failure') or {}).get('message', '')[:160]} {err or ''}")
            timing["gpuemu_s"] += time.perf_counter() - t
    return {"rows": rows, "log": log, "timing": timing, "problem": stem}


def main(argv: Optional[List[str]] = None) -> int:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(HERE))
    ap.add_argument("--problems", nargs="*", help="problem stems (default: all)")
    ap.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    root = Path(a.root)
    stems = [p.stem for p in sorted((root / "problems").glob("*.py"))]
    if a.problems:
        stems = [s for s in stems if s in a.problems]
    rows: List[Dict[str, Any]] = []
    timing = {"gpuemu_s": 0.0, "kernelbench_s": 0.0, "robust_s": 0.0}
    t0 = time.perf_counter()
    out_dir = Path(a.out) if a.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(str(root), s, a.dtypes, a.seeds, a.cases) for s in stems]
    with ProcessPoolExecutor(max(1, a.jobs), mp_context=mp.get_context("spawn")) as pool:
        futs = [pool.submit(measure_problem, j) for j in jobs]
        for fut in as_completed(futs):
            r = fut.result()
            rows += r["rows"]
            for k, v in r["timing"].items():
                timing[k] += v
            for line in r["log"]:
                print(line, file=sys.stderr)
            print(f"{r['problem']}: done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    rows.sort(key=lambda r: (r["problem"], r["candidate"], r["dtype"], r["seed"]))
    table = summary(rows, a.seeds)
    print(table)
    print(f"timing (s, summed over workers): {json.dumps({k: round(v, 1) for k, v in timing.items()})}")
    if out_dir:
        cmd = "python -m bench.kernelbench.measure " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(out_dir / "runs.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        (out_dir / "summary.md").write_text(f"Command: `{cmd}`\n\n{table}\n\ntiming (s, summed over workers): "
                                            f"{json.dumps({k: round(v, 1) for k, v in timing.items()})}\n")
    return 0


def summary(rows: List[Dict[str, Any]], seeds: int) -> str:
    correct = [r for r in rows if r["expect"] == "pass"]
    buggy = [r for r in rows if r["expect"] == "fail"]
    lines = ["| check | correct pairs flagged (false positives) | buggy pairs caught |", "|---|---:|---:|"]

    def rate(rs, key, fail_means):
        if key == "gpuemu":
            fails = [r for r in rs if r["gpuemu"] not in ("passed", "inconclusive")]
        else:
            fails = [r for r in rs if not r[key]]
        return len(fails), len(rs)

    for key, label in (("gpuemu", "gpuemu (per seed, all seeds)"), ("kernelbench", "KernelBench's check"),
                       ("robust", "robust-kbench-style")):
        fp, n_c = rate(correct, key, True)
        caught, n_b = rate(buggy, key, True)
        lines.append(f"| {label} | {fp}/{n_c} | {caught}/{n_b} |")
    lines.append("")
    lines.append("| seed | gpuemu false positives | gpuemu caught | caught rate |")
    lines.append("|---:|---:|---:|---:|")
    for s in range(seeds):
        c = [r for r in correct if r["seed"] == s]
        b = [r for r in buggy if r["seed"] == s]
        fp = sum(1 for r in c if r["gpuemu"] not in ("passed", "inconclusive"))
        cb = sum(1 for r in b if r["gpuemu"] not in ("passed", "inconclusive"))
        lines.append(f"| {s} | {fp}/{len(c)} | {cb}/{len(b)} | {cb / max(len(b), 1):.1%} |")
    lines.append("")
    by_bug: Dict[str, List[Dict[str, Any]]] = {}
    for r in buggy:
        by_bug.setdefault(r["bug"] or "?", []).append(r)
    # what "inconclusive" costs: the correct pairs' cases the reference could not resolve in full
    # (their resolvable elements were judged and passed), overall and where most frequent
    counted = [r for r in correct if r.get("case_counts")]
    if counted:
        tot = sum(r["case_counts"]["cases"] for r in counted)
        inc = sum(r["case_counts"]["inconclusive"] for r in counted)
        lines.append(f"Correct pairs' cases: {tot}, of which inconclusive {inc} ({inc / max(tot, 1):.1%}): "
                     "some elements unresolvable within the reference's own error, the rest judged and passed.")
        lines.append("")
        per: Dict[Tuple[str, str], List[int]] = {}
        for r in counted:
            a = per.setdefault((r["problem"], r["dtype"]), [0, 0])
            a[0] += r["case_counts"]["inconclusive"]
            a[1] += r["case_counts"]["cases"]
        top = sorted(per.items(), key=lambda kv: -kv[1][0] / max(kv[1][1], 1))[:15]
        lines.append("| problem | dtype | inconclusive cases of its correct pairs |")
        lines.append("|---|---|---:|")
        for (prob, dt), (i, n) in top:
            if i:
                lines.append(f"| {prob} | {dt} | {i}/{n} ({i / max(n, 1):.0%}) |")
        lines.append("")
    lines.append("| bug class | pairs x seeds | gpuemu caught | KernelBench caught | robust caught |")
    lines.append("|---|---:|---:|---:|---:|")
    for bug, rs in sorted(by_bug.items()):
        g = sum(1 for r in rs if r["gpuemu"] not in ("passed", "inconclusive"))
        kb = sum(1 for r in rs if not r["kernelbench"])
        rb = sum(1 for r in rs if not r["robust"])
        lines.append(f"| {bug} | {len(rs)} | {g} | {kb} | {rb} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
