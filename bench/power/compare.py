#!/usr/bin/env python3
"""Two power-curve measurements of the same ops side by side: how often a case catches each k.

    python3 -m bench.power.compare BEFORE/runs.jsonl AFTER/runs.jsonl [--ops sum mean]

For every op x dtype measured in both (runs.jsonl rows of power_curve.py), per k of the grid: the
share of cases whose error exceeds the envelope (a case "catches" that k), and the share of runs
with at least one such case, before and after. A change to the case generator that puts more cases
at the conditioning a dtype allows shows as a larger share of catching cases at the same k (and a
smaller k from which >= 95% of the runs are caught). The control (k = 1) must catch nothing in
either. Only the k measured in both are compared (scouted runs measure a window of k).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple


def load(path: str, ops: Optional[Sequence[str]]) -> Dict[Tuple[str, str], Dict[int, List[Tuple[int, int]]]]:
    """(op, dtype) -> k -> [(catching cases, cases)] per run (one seed counted once)."""
    out: Dict[Tuple[str, str], Dict[int, List[Tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    seen = set()
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if ops and r["op"] not in ops:
                continue
            key = (r["op"], r["dtype"], r["seed"], tuple(r["ks"]))
            if key in seen or r.get("error"):
                continue
            seen.add(key)
            env = r["envelope"]
            for i, k in enumerate(r["ks"]):
                col = [row[i] for row in r["errors"] if row is not None and i < len(row)]
                out[(r["op"], r["dtype"])][k].append((sum(1 for e in col if e is not None and e > env), len(col)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--ops", nargs="*")
    args = ap.parse_args()
    before, after = load(args.before, args.ops), load(args.after, args.ops)
    print("| op | dtype | k | cases catching, before | after | runs caught, before | after |")
    print("|---|---|---|---:|---:|---:|---:|")
    status = 0
    for key in sorted(set(before) & set(after)):
        for k in sorted(set(before[key]) & set(after[key])):
            b, a = before[key][k], after[key][k]

            def share(runs):
                caught = sum(c for c, _ in runs)
                total = sum(n for _, n in runs)
                return caught / total if total else 0.0

            def runs_caught(runs):
                return sum(1 for c, _ in runs if c > 0) / len(runs) if runs else 0.0

            if k == 1 and (share(b) > 0 or share(a) > 0):
                status = 1
            if k > 1 and share(b) >= 0.999 and share(a) >= 0.999:
                continue  # both catch every case: no information
            print(f"| {key[0]} | {key[1]} | 2^{k.bit_length() - 1} | {share(b):.1%} | {share(a):.1%} | "
                  f"{runs_caught(b):.0%} ({len(b)}) | {runs_caught(a):.0%} ({len(a)}) |")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
