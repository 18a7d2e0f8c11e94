#!/usr/bin/env python3
"""Re-judge captured CUDA cases with this checkout's error model, on any machine (no GPU).

    python -m bench.conformance.rejudge DIR [DIR ...]     # folders written by capture_cuda.py

capture_cuda.py kept each failing case's exact input snapshot and the outputs the GPU returned.
This regenerates each case from its seed (and checks its bytes against the snapshot: the same case
bit for bit), judges the stored CUDA output with the current model, and prints the verdict then
and now. A model change made to admit a formulation is checked here on the outputs of the real
kernel, not only on an emulation of it. Exit status 1 if a case could not be regenerated
identically.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from gpuemu import inprocess

from bench.conformance.impls import variants, varied_attrs


class _Unpickler(pickle.Unpickler):
    """Reads pickles numpy 2 wrote (numpy._core) under numpy 1 (numpy.core), and the reverse."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except ModuleNotFoundError:
            swapped = (module.replace("numpy._core", "numpy.core") if "numpy._core" in module
                       else module.replace("numpy.core", "numpy._core"))
            return super().find_class(swapped, name)


def load(path: Path) -> Dict[str, Any]:
    with open(path, "rb") as f:
        return _Unpickler(f).load()


def rejudge(rec: Dict[str, Any]) -> Dict[str, Any]:
    row = rec["row"]
    v = next(v for v in variants([row["op"]], [row["dtype"]], "cuda")
             if v.impl.name == row["impl"] and v.style == row["style"])
    got = inprocess.replay(row["op"], None, rec["failure"]["seed"], value_distribution=row["strategy"],
                           dtypes=[row["dtype"]], dims=v.impl.dims, vary_attrs=varied_attrs(row["op"]) or None,
                           precision=v.impl.precision)
    case = got["case"]
    same = case.snapshot() == rec["snapshot"]
    verdict = inprocess._engine().judge(case, rec["cuda_out"]) if "cuda_out" in rec else None
    return {"same_case": same, "verdict": verdict}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args(argv)
    bad = 0
    files = sorted({p for d in a.dirs for p in Path(d).glob("*.pkl")})
    for path in files:
        rec = load(path)
        if "cuda_out" not in rec:
            print(f"{path.name}: the kernel raised on CUDA ({rec.get('error', '?')[:80]}); nothing to re-judge")
            continue
        r = rejudge(rec)
        bad += not r["same_case"]
        then = rec.get("verdict") or {}
        now = r["verdict"]
        print(f"{path.name}: {'same case' if r['same_case'] else 'CASE DIFFERS'}; then "
              f"{'pass' if then.get('passed') else 'FAIL'} ({then.get('max_error')}), now "
              f"{'pass' if now['passed'] else 'FAIL'} ({float(now['max_error']):.4g}): {now['message'][:110]}")
    print(f"{len(files)} cases, {bad} not regenerated identically", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
