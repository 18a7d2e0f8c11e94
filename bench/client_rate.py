"""Cases per second of one long client-side run: ``fuzz_op_client_side`` with a torch kernel,
after a warm-up chunk, against a daemon started for it, and the CPU time a case costs the daemon
and this process (evidence/race/history.md, "Round trips,
copies, page faults and prefetch").

    GPUEMU_BIN_DIR=build/bin .venv/bin/python -m bench.client_rate [--op softmax] [--cases 300]
                                                                   [--seed 16] [--repeat 2]

Run it from a worktree of another commit to compare builds, with that worktree's own python/ first
on the path (the venv's gpuemu.pth points at this checkout's):
``PYTHONPATH=python GPUEMU_BIN_DIR=build/bin /path/to/.venv/bin/python -m bench.client_rate``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gpuemu import Client

REPO = Path(__file__).resolve().parents[1]

KERNELS = {
    "softmax": lambda i: torch.softmax(i["x"], dim=i["dim"]),
    "layer_norm": lambda i: F.layer_norm(i["x"], i["x"].shape[-1:], i.get("weight"), i.get("bias"), i.get("eps", 1e-5)),
    "matmul": lambda i: i["a"] @ i["b"],
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="softmax", choices=sorted(KERNELS))
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    bin_dir = Path(os.environ.get("GPUEMU_BIN_DIR", REPO / "build" / "bin")).resolve()
    with tempfile.TemporaryDirectory() as home:
        os.environ["GPUEMU_HOME"] = home
        c = Client(home=home, daemon_path=str(bin_dir / "gpuemu-daemon"))
        try:
            k = KERNELS[a.op]
            c.fuzz_op_client_side(a.op, k, iterations=16, dtypes=["float32"], seed=a.seed, framework="torch")
            pid = int(c.stats()["pid"])
            for _ in range(a.repeat):
                t, d0, c0 = time.perf_counter(), cpu_seconds(pid), time.process_time()
                r = c.fuzz_op_client_side(a.op, k, iterations=a.cases, dtypes=["float32"], seed=a.seed,
                                          framework="torch")
                wall = time.perf_counter() - t
                print(f"{a.op}: {a.cases / wall:.1f} cases/s ({r.passed}/{r.total} passed); CPU ms a case: "
                      f"daemon {1e3 * (cpu_seconds(pid) - d0) / a.cases:.2f}, "
                      f"client {1e3 * (time.process_time() - c0) / a.cases:.2f} [{REPO}]")
        finally:
            c.request("shutdown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
