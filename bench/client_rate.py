"""Cases per second of one long client-side run: ``fuzz_op_client_side`` with a torch kernel,
after a warm-up chunk, against a daemon started for it (docs/performance.md, "Round trips,
copies, page faults and prefetch").

    GPUEMU_BIN_DIR=build/bin .venv/bin/python bench/client_rate.py [--op softmax] [--cases 300]
                                                                   [--seed 16] [--repeat 2]

Run it from a worktree of another commit (its own python/ and build/bin) to compare builds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gpuemu import Client  # noqa: E402

KERNELS = {
    "softmax": lambda i: torch.softmax(i["x"], dim=i["dim"]),
    "layer_norm": lambda i: F.layer_norm(i["x"], i["normalized_shape"], i.get("weight"), i.get("bias"), i["eps"]),
    "matmul": lambda i: i["a"] @ i["b"],
}


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
            for _ in range(a.repeat):
                t = time.perf_counter()
                r = c.fuzz_op_client_side(a.op, k, iterations=a.cases, dtypes=["float32"], seed=a.seed,
                                          framework="torch")
                print(f"{a.op}: {a.cases / (time.perf_counter() - t):.1f} cases/s "
                      f"({r.passed}/{r.total} passed) [{REPO}]")
        finally:
            c.request("shutdown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
