#!/usr/bin/env python3
"""Each pair's verdict (the JSON lines of `gpuemu kernelbench DIR DIR`) against its candidate's
``EXPECT`` (and ``DTYPES``): a Markdown table, and exit status 1 when one disagrees or when a
candidate of the folder has no verdict at all (a run that judged nothing is not a clean run).

    python3 -m bench.kernelbench.expectations verdicts.jsonl bench/kernelbench/gpu/candidates
"""

import ast
import json
import sys
from pathlib import Path


def meta(path: Path):
    tree = ast.parse(path.read_text())
    out = {"EXPECT": "pass", "BUG": None, "DTYPES": None}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in out:
                out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def main(argv):
    rows = [json.loads(x) for x in open(argv[0]) if x.strip()]
    root = Path(argv[1])
    lines = ["| problem | candidate | dtype | expected | verdict | classes | ok |", "|---|---|---|---|---|---|---|"]
    bad = 0
    for r in rows:
        m = meta(root / r["problem"] / f"{r['candidate']}.py")
        if m["DTYPES"] and r["dtype"] not in m["DTYPES"]:
            continue
        passed = r["verdict"] in ("passed", "inconclusive")
        ok = passed == (m["EXPECT"] == "pass") and r["verdict"] != "error"
        bad += not ok
        lines.append(f"| {r['problem']} | {r['candidate']} | {r['dtype']} | {m['EXPECT']} ({m['BUG'] or 'correct'}) | "
                     f"{r['verdict']} ({r.get('passed', 0)}/{r.get('cases', 0)}) | {', '.join(r.get('failure_classes', []))} "
                     f"| {'yes' if ok else '**NO**'} |")
    judged = {(r["problem"], r["candidate"]) for r in rows}
    for path in sorted(root.glob("*/*.py")):
        if path.name.startswith("_") or (path.parent.name, path.stem) in judged:
            continue
        bad += 1
        lines.append(f"| {path.parent.name} | {path.stem} | | {meta(path)['EXPECT']} | no verdict | | **NO** |")
    print("\n".join(lines))
    print(f"\n{len(lines) - 2} pairs, {bad} not as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
