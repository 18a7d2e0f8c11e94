"""Issue 47, "A case is one case": every buggy kernel of bench/gpu/backward_client.py through
fuzz_op_client_side(..., backward=True) on the CPU, with results.failed, results.gradients.failed
and results.ok per bug (each must show in results.failed).

    GPUEMU_HOME=$(mktemp -d) PYTHONPATH=. .venv/bin/python evidence/backward/one_case.py [--cases 40] [--seed 1]
"""
import argparse

from bench.gpu.backward_client import kernels
from gpuemu import Client

ap = argparse.ArgumentParser()
ap.add_argument("--cases", type=int, default=40)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
print("| op | bug | dtype | results.failed | results.gradients.failed | results.forward.failed | results.ok | shows in failed |")
print("|---|---|---|---:|---:|---:|---|---|")
missed = 0
with Client() as c:
    for op, label, run_op, correct, dtypes in kernels():
        if correct:
            continue
        for dt in dtypes:
            r = c.fuzz_op_client_side(op, run_op, iterations=a.cases, dtypes=[dt], seed=a.seed, backward=True)
            shows = r.failed > 0 and r.failed >= r.gradients.failed
            missed += not shows
            print(f"| {op} | {label} | {dt} | {r.failed}/{r.total} | {r.gradients.failed}/{r.gradients.total} | "
                  f"{r.forward.failed}/{r.forward.total} | {r.ok} | {'yes' if shows else 'NO'} |", flush=True)
sys.exit(1 if missed else 0)
