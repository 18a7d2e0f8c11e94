"""Which of PyTorch's fused SDPA backends check the alignment of which operand (CUDA only).

For each backend (flash, efficient), dtype and operand (q, k or v), one call of
F.scaled_dot_product_attention with that operand at a storage offset of one element (a legal strided
tensor whose data pointer is not 16-byte aligned) and the other two contiguous, each in a process of
its own (a crash leaves the CUDA context broken). Prints one line per call: "ok", a clean refusal
("... is not correctly aligned", "No available kernel") or the crash ("misaligned address").
evidence/gpu/sdpa.md records the output (sdpa/probe_sdpa_alignment.txt).

    PYTHONPATH=. python3 evidence/gpu/probe_sdpa_alignment.py [--jobs 8]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from bench.conformance.imprecise_cuda import _MISALIGNED


def probe(backend: str, dtype: str, operand: str) -> str:
    r = subprocess.run([sys.executable, "-c", _MISALIGNED.format(backend=backend, dtype=dtype, operand=operand)],
                       capture_output=True, text=True, timeout=300)
    said = (r.stdout.strip().splitlines() or [r.stderr.strip()[-200:] or f"exit {r.returncode}"])[-1]
    return f"{backend:20} {dtype:9} {operand} offset by one element: {said[:160]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=8)
    a = ap.parse_args()
    calls = [(b, d, o) for b in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION") for d in ("float32", "float16", "bfloat16")
             for o in ("q", "k", "v")]
    with ThreadPoolExecutor(a.jobs) as pool:
        for line in pool.map(lambda c: probe(*c), calls):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
