"""`gpuemu lint` on every cubin of a Triton cache (the corpus's kernels, compiled there by Triton's
own ptxas) and on nvcc's cubins, checked against `cuobjdump -res-usage` of the same files: registers,
stack and shared memory per kernel must agree, and the SASS opcode histogram (from cuobjdump or
nvdisasm) must be there and count the kernel's instructions.

    python -m bench.gpu.lint_check GPUEMU CACHE_DIR [CUBIN ...] --markdown OUT.md --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List


def res_usage(cubin: Path, cuobjdump: str) -> Dict[str, Dict[str, int]]:
    out = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    funcs: Dict[str, Dict[str, int]] = {}
    name = None
    for line in out.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        if name and "REG:" in line:
            funcs[name] = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}
            name = None
    return funcs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("gpuemu")
    ap.add_argument("inputs", nargs="+", type=Path, help="Triton cache directories or cubins")
    ap.add_argument("--per-kernel", type=int, default=1,
                    help="cubins per kernel name (a Triton cache holds one per specialisation: thousands)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    a = ap.parse_args()
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    cubins: List[Path] = []
    taken: Dict[str, int] = {}
    for p in a.inputs:
        for c in (sorted(p.rglob("*.cubin")) if p.is_dir() else [p]):
            if taken.get(c.stem, 0) < a.per_kernel:
                taken[c.stem] = taken.get(c.stem, 0) + 1
                cubins.append(c)
    rows = []
    for cubin in cubins:
        rep = json.loads(subprocess.run([a.gpuemu, "lint", "--json", str(cubin)], capture_output=True, text=True).stdout
                         or "{}")
        ref = res_usage(cubin, cuobjdump)
        for k in rep.get("kernels", []):
            r = ref.get(k["name"], {})
            total = sum(k.get("sass_opcodes", {}).values())
            row = {"cubin": str(cubin), "kernel": k["name"], "registers": k.get("registers"), "cuobjdump_reg": r.get("REG"),
                   "stack": k.get("stack_bytes"), "cuobjdump_stack": r.get("STACK"), "shared": k.get("shared_bytes"),
                   "cuobjdump_shared": r.get("SHARED"), "instructions": k.get("instructions"), "sass_opcodes": total,
                   "distinct_opcodes": len(k.get("sass_opcodes", {}))}
            # cuobjdump's SHARED counts the 1 KiB an sm_90 CTA reserves for the system; the lint reports
            # the kernel's own shared memory (lint/cubin_reader.cpp subtracts the reserve)
            shared_ok = row["shared"] == r.get("SHARED") or (
                k.get("arch", "").startswith("sm_9") and r.get("SHARED") == (row["shared"] or 0) + 1024)
            row["agree"] = (r != {} and row["registers"] == r.get("REG") and row["stack"] == r.get("STACK")
                            and shared_ok and total > 0)
            rows.append(row)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return report(rows, len(cubins), a.markdown)


def report(rows: List[Dict], ncubins: int, markdown: "Path | None") -> int:
    lines = ["| kernel | regs (lint / cuobjdump) | stack | shared | SASS instructions | opcodes | agree |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kernel'][:60]} | {r['registers']} / {r['cuobjdump_reg']} | {r['stack']} / {r['cuobjdump_stack']} "
                     f"| {r['shared']} / {r['cuobjdump_shared']} | {r['sass_opcodes']} | {r['distinct_opcodes']} | "
                     f"{'yes' if r['agree'] else 'NO'} |")
    lines.append(f"\n{len(rows)} kernels in {ncubins} cubins; agree: {sum(r['agree'] for r in rows)} "
                 "(shared: cuobjdump's figure includes sm_90's 1 KiB per-CTA reserve, the lint's does not).")
    text = "\n".join(lines) + "\n"
    if markdown:
        markdown.write_text(text)
    print(text)
    return 0 if rows and all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
