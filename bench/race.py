"""The race of issue 16: gpuemu against the loop users write today, on the same cases.

    GPUEMU_BIN_DIR=build/bin .venv/bin/python -m bench.race [--cases 60] [--seed 16] [--ops ...]
                                                           [--repeat 2] [--json out.json]

For each op (softmax, layer_norm, matmul, flash_attention), float32 (``--dtype bfloat16``: torch
1.13's CPU kernels take it, most of them not float16), the fuzzer's own mix of sizes
(adversarial values, layouts on, the op's default attrs), ``--cases`` cases drawn once with
``get_test_batch`` and timed through:

- ``loop``: the peer, what a kernel test does today, one case at a time: the torch kernel on the
  case's tensors, the same torch code on float64 copies as the reference, and
  ``torch.testing.assert_close(out, ref.to(out.dtype))`` (a mismatch is counted, not raised).
  Generating the cases is excluded from its time, as a test's fixtures are.
- ``client``: ``Client().fuzz_op_client_side(op, kernel, iterations=cases, seed=...)`` with its
  defaults against a daemon started for the run: the same cases (same master seed), generated,
  moved, run and judged.
- ``submit``: ``get_test_batch`` then ``submit_output`` case by case (everything timed).
- ``inproc``: ``gpuemu.fuzz_op_in_process`` with the same arguments (no daemon, no transport).

The kernel's own time inside each gpuemu mode is measured too, so the table shows what gpuemu
adds per case. The machine's limit is measured in the same run: memcpy bandwidth (numpy copy of
64 MiB), and each row's bytes (inputs + output, in the cases' dtype) give the cases/s a pure copy of them
would reach. Each timing is the best of ``--repeat``. Ratios are gpuemu / loop cases/s (> 1:
gpuemu is faster).

``--sizes``: how the cost grows with shape. For each op, dims pinned on a grid from small to the
schema's large (SIZE_GRID), ``--size-cases`` cases per size: the loop and ``fuzz_op_client_side``
on the same cases (same master seed and pins), their cases/s, the ratio, gpuemu's added ms per
case, and the copy limit (cases/s a pure memcpy of each case's bytes would reach) measured in the
same run.

Then ``gpuemu.reference`` against numpy float64 on the same arrays (matmul 1024^3, a four-line
softmax over 2048x4096), ratio numpy time / gpuemu time (``--no-reference`` skips it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import numpy as np
import torch
import torch.nn.functional as F

import gpuemu
from gpuemu import Client

OPS = ("softmax", "layer_norm", "matmul", "flash_attention")
DTYPE = "float32"  # --dtype


def itemsize() -> int:
    return 4 if DTYPE == "float32" else 2


# ---- the kernels: plain torch, in whatever dtype they are handed (float32 for the case, float64
# for the loop's reference)

def k_softmax(a: Dict[str, Any]) -> torch.Tensor:
    return torch.softmax(a["x"], dim=a.get("dim", -1))


def k_layer_norm(a: Dict[str, Any]) -> torch.Tensor:
    x = a["x"]
    return F.layer_norm(x, x.shape[-1:], a.get("weight"), a.get("bias"), a.get("eps", 1e-5))


def k_matmul(a: Dict[str, Any]) -> torch.Tensor:
    return a["a"] @ a["b"]


def k_flash_attention(a: Dict[str, Any]) -> torch.Tensor:
    q, k, v = a["q"], a["k"], a["v"]
    h, hkv = q.shape[-3], k.shape[-3]
    if h != hkv:
        k = k.repeat_interleave(h // hkv, dim=-3)
        v = v.repeat_interleave(h // hkv, dim=-3)
    scale = a.get("scale")
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if a.get("causal"):
        lq, lk = s.shape[-2:]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


KERNELS: Dict[str, Callable[[Dict[str, Any]], torch.Tensor]] = {
    "softmax": k_softmax, "layer_norm": k_layer_norm, "matmul": k_matmul,
    "flash_attention": k_flash_attention}


class Timed:
    """A run_op that accumulates the kernel's own time."""

    def __init__(self, fn: Callable[[Dict[str, Any]], torch.Tensor]) -> None:
        self.fn = fn
        self.seconds = 0.0

    def __call__(self, args: Dict[str, Any]) -> torch.Tensor:
        t = time.perf_counter()
        out = self.fn(args)
        self.seconds += time.perf_counter() - t
        return out


def case_args(case: Dict[str, Any]) -> Dict[str, Any]:
    args = dict(case["attrs"])
    args.update(case["inputs"])
    return args


def to64(args: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in args.items()}


def usual_loop(fn: Callable, cases: List[Dict[str, Any]]) -> int:
    """The peer: kernel, float64 reference, assert_close, one case at a time. Returns mismatches."""
    bad = 0
    for args in cases:
        out = fn(args)
        ref = fn(to64(args))
        try:
            torch.testing.assert_close(out, ref.to(out.dtype))
        except AssertionError:
            bad += 1
    return bad


def memcpy_gbps() -> float:
    src = np.ones(64 << 20, dtype=np.uint8)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return src.nbytes / best / 1e9


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def np_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


# gpuemu.reference against numpy float64 on the same arrays (issue 16: matmul >= 0.9x, softmax >= 1x)
REFERENCE_RACE = (
    ("matmul", "1024x1024 @ 1024x1024", 0.9,
     lambda rng: {"a": rng.standard_normal((1024, 1024)), "b": rng.standard_normal((1024, 1024))},
     lambda a: a["a"] @ a["b"]),
    ("softmax", "2048x4096, dim -1", 1.0,
     lambda rng: {"x": rng.standard_normal((2048, 4096)) * 4.0},
     lambda a: np_softmax(a["x"])),
)


def race_reference(repeat: int) -> List[Dict[str, Any]]:
    """Best of ``repeat`` (at least 3) for each side, alternating, on the same float64 arrays; the
    values agree to a few ulps of the largest (both are fp64 computations of the same formula)."""
    rows = []
    rng = np.random.default_rng(16)
    for op, shape, goal, make, peer in REFERENCE_RACE:
        args = make(rng)
        ours, theirs = gpuemu.reference(op, args), peer(args)
        diff = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
        t_np, t_ge = math.inf, math.inf
        for _ in range(max(repeat, 3)):
            t_np = min(t_np, best_of(1, lambda: peer(args)))
            t_ge = min(t_ge, best_of(1, lambda: gpuemu.reference(op, args)))
        rows.append({"op": op, "shape": shape, "numpy_ms": t_np * 1e3, "reference_ms": t_ge * 1e3,
                     "ratio": t_np / t_ge, "goal": goal, "max_rel_diff": diff})
    return rows


# dims pinned per size, from small to the largest each op's schema budget lets the fuzzer draw
# (max_elements, max_work: softmax 2^18 elements, layer_norm 2^20, matmul 2^25 multiply-adds,
# attention 2^24): softmax/layer_norm rows x N, matmul M = N = K, attention B=1, H=4, D=64, Lq = Lk.
SIZE_GRID: Dict[str, List[Dict[str, int]]] = {
    "softmax": [{"R": r, "N": n} for r, n in ((64, 128), (64, 1024), (32, 4096), (16, 16384))],
    "layer_norm": [{"R": r, "N": n} for r, n in ((64, 128), (64, 1024), (64, 4096), (60, 16384))],
    "matmul": [{"M": n, "N": n, "K": n} for n in (64, 128, 192, 256)],
    "flash_attention": [{"B": 1, "H": 4, "Hkv": 4, "D": 64, "Lq": n, "Lk": n} for n in (64, 128, 192, 256)],
}


def race_size(client: Client, op: str, dims: Dict[str, int], n: int, seed: int, repeat: int,
              gbps: float) -> Dict[str, Any]:
    """The loop and fuzz_op_client_side on ``n`` cases of one pinned shape."""
    fn = KERNELS[op]
    batch = client.get_test_batch(op, count=n, seed=seed, dtypes=[DTYPE], framework="torch", dims=dims)
    cases = [case_args(c) for c in batch]
    elements = sum(int(v.numel()) for v in batch[0]["inputs"].values() if isinstance(v, torch.Tensor))
    nbytes = itemsize() * (elements + int(fn(cases[0]).numel()))
    kernel_s = best_of(repeat, lambda: [fn(a) for a in cases])
    loop_s = best_of(repeat, lambda: usual_loop(fn, cases))
    got: Dict[str, Any] = {}

    def client_run() -> None:
        got["r"] = client.fuzz_op_client_side(op, fn, iterations=n, seed=seed, dtypes=[DTYPE],
                                              framework="torch", dims=dims)

    client_s = best_of(repeat, client_run)
    return {"op": op, "dims": dims, "cases": n, "elements": elements, "bytes": nbytes,
            "loop_cps": n / loop_s, "client_cps": n / client_s, "ratio": loop_s / client_s,
            "kernel_ms": kernel_s / n * 1e3, "client_added_ms": (client_s - kernel_s) / n * 1e3,
            "loop_added_ms": (loop_s - kernel_s) / n * 1e3, "copy_cps": gbps * 1e9 / nbytes,
            "client_failed": got["r"].failed}


def race_op(client: Client, op: str, n: int, seed: int, repeat: int, gbps: float) -> Dict[str, Any]:
    fn = KERNELS[op]
    batch = client.get_test_batch(op, count=n, seed=seed, dtypes=[DTYPE], framework="torch")
    cases = [case_args(c) for c in batch]
    elements = [sum(int(v.numel()) for v in c["inputs"].values() if isinstance(v, torch.Tensor))
                for c in batch]
    out_elems = [int(fn(a).numel()) for a in cases]
    nbytes = [itemsize() * (e + o) for e, o in zip(elements, out_elems)]

    row: Dict[str, Any] = {"op": op, "cases": n, "seed": seed,
                           "median_elements": int(statistics.median(elements)),
                           "mean_bytes": float(np.mean(nbytes))}
    mismatches = usual_loop(fn, cases)
    row["loop_s"] = best_of(repeat, lambda: usual_loop(fn, cases))
    row["loop_mismatches"] = mismatches
    kernel_s = best_of(repeat, lambda: [fn(a) for a in cases])
    row["kernel_s"] = kernel_s

    results: Dict[str, Any] = {}

    def client_run() -> None:
        results["client"] = client.fuzz_op_client_side(op, fn, iterations=n, seed=seed, dtypes=[DTYPE], framework="torch")

    def submit_run() -> None:
        got = client.get_test_batch(op, count=n, seed=seed, dtypes=[DTYPE], framework="torch")
        fails = 0
        for c in got:
            v = client.submit_output(op, c["inputs"], fn(case_args(c)), c["seed"])
            fails += 0 if v.passed else 1
        results["submit_failed"] = fails

    def inproc_run() -> None:
        results["inproc"] = gpuemu.fuzz_op_in_process(op, fn, iterations=n, seed=seed, dtypes=[DTYPE], framework="torch")

    row["client_s"] = best_of(repeat, client_run)
    row["submit_s"] = best_of(repeat, submit_run)
    row["inproc_s"] = best_of(repeat, inproc_run)
    row["client_failed"] = results["client"].failed
    row["inproc_failed"] = results["inproc"].failed
    row["submit_failed"] = results["submit_failed"]
    row["copy_s"] = sum(nbytes) / (gbps * 1e9)
    for mode in ("loop", "client", "submit", "inproc"):
        row[f"{mode}_cps"] = n / row[f"{mode}_s"]
    for mode in ("client", "submit", "inproc"):
        row[f"{mode}_ratio"] = row[f"{mode}_cps"] / row["loop_cps"]
        # What gpuemu adds per case over the kernel's own time.
        row[f"{mode}_overhead_ms"] = (row[f"{mode}_s"] - kernel_s) / n * 1e3
    row["loop_overhead_ms"] = (row["loop_s"] - kernel_s) / n * 1e3
    return row


@contextlib.contextmanager
def race_client() -> Iterator[Client]:
    """A Client on a daemon of its own (a temporary home), shut down afterwards."""
    with tempfile.TemporaryDirectory(prefix="gpuemu-race-") as home:
        client = Client(home=home)
        try:
            yield client
        finally:
            try:
                client.request("shutdown")
            except Exception:  # noqa: BLE001
                pass


def sizes_table(args: argparse.Namespace, gbps: float) -> int:
    rows = []
    with race_client() as client:
        for op in args.ops:
            for dims in SIZE_GRID[op]:
                rows.append(race_size(client, op, dims, args.size_cases, args.seed, args.repeat, gbps))
    print(f"memcpy {gbps:.1f} GB/s; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.size_cases} {DTYPE} cases per size, master seed {args.seed}, best of {args.repeat}")
    print("| op | dims | elements | loop cases/s | client cases/s | ratio | kernel ms | added ms: loop, client "
          "| copy-limit cases/s |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        dims = " ".join(f"{k}={v}" for k, v in r["dims"].items())
        print(f"| {r['op']} | {dims} | {r['elements']} | {r['loop_cps']:.1f} | {r['client_cps']:.1f} "
              f"| {r['ratio']:.2f}x | {r['kernel_ms']:.2f} | {r['loop_added_ms']:.2f}, {r['client_added_ms']:.2f} "
              f"| {r['copy_cps']:.0f} |")
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    bad = [r for r in rows if r["client_failed"]]
    for r in bad:
        print(f"warning: {r['op']} {r['dims']}: gpuemu flagged torch's kernel ({r['client_failed']})", file=sys.stderr)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--ops", nargs="*", default=list(OPS), choices=OPS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                    help="the cases' dtype (default float32)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--no-reference", action="store_true", help="skip gpuemu.reference against numpy")
    ap.add_argument("--sizes", action="store_true",
                    help="only the cost over shapes (SIZE_GRID): loop vs fuzz_op_client_side per pinned size")
    ap.add_argument("--size-cases", type=int, default=12, help="cases per size with --sizes (default 12)")
    args = ap.parse_args()
    global DTYPE
    DTYPE = args.dtype
    if args.threads:
        torch.set_num_threads(args.threads)

    gbps = memcpy_gbps()
    if args.sizes:
        return sizes_table(args, gbps)
    rows = []
    with race_client() as client:
        for op in args.ops:
            rows.append(race_op(client, op, args.cases, args.seed, args.repeat, gbps))
    print(f"memcpy {gbps:.1f} GB/s; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.cases} {DTYPE} cases per op, master seed {args.seed}, best of {args.repeat}")
    print("| op | median elements | loop cases/s | client cases/s (ratio) | submit cases/s (ratio) "
          "| in-process cases/s (ratio) | kernel ms/case | added ms/case: loop, client, submit, in-process "
          "| copy-limit cases/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['op']} | {r['median_elements']} | {r['loop_cps']:.0f} "
              f"| {r['client_cps']:.0f} ({r['client_ratio']:.2f}x) "
              f"| {r['submit_cps']:.0f} ({r['submit_ratio']:.2f}x) "
              f"| {r['inproc_cps']:.0f} ({r['inproc_ratio']:.2f}x) "
              f"| {r['kernel_s'] / r['cases'] * 1e3:.2f} "
              f"| {r['loop_overhead_ms']:.2f}, {r['client_overhead_ms']:.2f}, {r['submit_overhead_ms']:.2f}, "
              f"{r['inproc_overhead_ms']:.2f} "
              f"| {r['cases'] / r['copy_s']:.0f} |")
    ref_rows = [] if args.no_reference else race_reference(args.repeat)
    if ref_rows:
        print("\n| gpuemu.reference vs numpy, float64 | numpy ms | gpuemu.reference ms | ratio (goal) "
              "| max difference / max value |")
        print("|---|---:|---:|---:|---:|")
        for r in ref_rows:
            print(f"| {r['op']} {r['shape']} | {r['numpy_ms']:.1f} | {r['reference_ms']:.1f} "
                  f"| {r['ratio']:.2f}x (>= {r['goal']}x) | {r['max_rel_diff']:.1e} |")
    bad = [r for r in rows if r["client_failed"] or r["inproc_failed"] or r["submit_failed"]]
    for r in bad:
        print(f"warning: {r['op']}: gpuemu flagged torch's kernel (client {r['client_failed']}, "
              f"submit {r['submit_failed']}, in-process {r['inproc_failed']})", file=sys.stderr)
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in rows + ref_rows) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
