"""Overhead of the Python client over the raw protocol (issue #5's benchmark; docs/performance.md,
"Python client overhead").

    GPUEMU_BIN_DIR=build/bin .venv/bin/python -m bench.bench_client [--cases 512] [--mib 16]

Starts a daemon in a temporary GPUEMU_HOME and measures, in the same run:

- ``ping``: one raw round trip (``_core.Connection.call``, no Python facade): the unit the goal is
  stated in (per-case client overhead < 2 round trips).
- small cases (softmax float32 [1, 8], contiguous), per case:
  - ``raw``: the named peer — the same get_test_batch / submit_outputs frames written by hand over
    ``_core.Connection.call`` (16 cases a request), numpy views over the received storage, the same
    numpy kernel;
  - ``fuzz_op_client_side`` (16 cases a request, contract checks, mutation check, failure
    bookkeeping);
  - ``get_test_batch`` + ``submit_output`` (one request per case: the daemon-orchestrated loop).
  The kernel's own time is measured and subtracted from both sides' "overhead".
- large tensors (softmax float32 [R, 4096] of ``--mib`` MiB): get_test_batch + submit_output through
  the client against the same two requests by hand (throughput in MiB/s of input + output moved),
  and a numpy memcpy of the same bytes as the ceiling of one copy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from gpuemu import Client


def softmax(x: np.ndarray, dim: int = -1) -> np.ndarray:
    m = x.max(axis=dim, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=dim, keepdims=True)


class Timed:
    """run_op wrapper that accumulates the kernel's own time."""

    def __init__(self, fn):
        self.fn = fn
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, inputs):
        t = time.perf_counter()
        out = self.fn(inputs["x"], inputs["dim"])
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return out


def raw_call(conn, method, params, tensors=()):
    reply, tens = conn.call(json.dumps({"v": 1, "method": method, "params": params}), list(tensors), None)
    h = json.loads(reply)
    assert h["ok"], h
    return h["result"], {k: (d, s, st, o, b) for k, d, s, st, o, b in tens}


def raw_fuzz(conn, op, options, iterations, seed, kernel_time):
    """The peer: fuzz_op_client_side's requests, written by hand."""
    done = 0
    while done < iterations:
        n = min(16, iterations - done)
        res, tens = raw_call(conn, "get_test_batch", {"op": op, "count": n, "start_index": done, "seed": seed,
                                                     "options": options})
        items, out_tensors = [], []
        for i, c in enumerate(res["cases"]):
            d, shape, strides, offset, storage = tens[f"cases/{i}/x"]
            x = np.ndarray(tuple(shape), np.float32, buffer=storage.view(np.float32), offset=offset * 4,
                           strides=tuple(s * 4 for s in strides))
            t = time.perf_counter()
            out = softmax(x, c["attrs"]["dim"])
            kernel_time[0] += time.perf_counter() - t
            items.append({"case": c})
            out_tensors.append((f"items/{i}/outputs/0", "float32", list(out.shape),
                                [s // 4 for s in out.strides], 0, out))
            out_tensors.append((f"items/{i}/inputs/x", d, shape, strides, offset, storage))
        r, _ = raw_call(conn, "submit_outputs", {"op": op, "options": options, "items": items,
                                                 "kernel": {"kind": "client", "name": "raw"}, "store": True},
                        out_tensors)
        assert all(x["passed"] for x in r["results"])
        done += n


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=512, help="small cases per measurement")
    ap.add_argument("--mib", type=int, default=16, help="size of the large input, MiB")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-") as home:
        client = Client(home=home)
        conn = client._conn
        try:
            return run(client, conn, args)
        finally:
            try:
                client.request("shutdown")
            except Exception:  # noqa: BLE001
                pass
            time.sleep(0.2)


def run(client, conn, args) -> int:
    op = "softmax"
    options = {"distribution": "adversarial", "layouts": False, "dtypes": ["float32"], "dims": {"R": [1], "N": [8]},
               "attrs": {"dim": -1}}
    n = args.cases

    # one raw round trip
    for _ in range(200):
        raw_call(conn, "ping", {})
    k = 2000
    t = time.perf_counter()
    for _ in range(k):
        raw_call(conn, "ping", {})
    rt = (time.perf_counter() - t) / k

    # small cases: raw peer, client-side fuzzing, batch + submit_output
    raw_kernel = [0.0]
    raw_fuzz(conn, op, options, 64, 1, raw_kernel)  # warm
    raw_kernel = [0.0]
    raw_best, _ = best(lambda: raw_fuzz(conn, op, options, n, 1, raw_kernel), args.repeat)
    raw_k = raw_kernel[0] / (n * args.repeat)

    kern = Timed(softmax)
    client.fuzz_op_client_side(op, kern, iterations=64, seed=1, dtypes=["float32"], dims={"R": 1, "N": 8},
                               attrs={"dim": -1}, layouts=False)  # warm
    kern = Timed(softmax)
    fz_best, _ = best(lambda: client.fuzz_op_client_side(op, kern, iterations=n, seed=1, dtypes=["float32"],
                                                         dims={"R": 1, "N": 8}, attrs={"dim": -1}, layouts=False),
                      args.repeat)
    fz_k = kern.seconds / kern.calls

    def loop():
        for case in client.get_test_batch(op, count=n // 4, seed=2, dtypes=["float32"], dims={"R": 1, "N": 8},
                                          attrs={"dim": -1}, layouts=False):
            v = client.submit_output(op, case["inputs"], softmax(case["inputs"]["x"], -1), case["seed"])
            assert v.passed
    loop_best, _ = best(loop, args.repeat)

    per_raw = raw_best / n
    per_fz = fz_best / n
    per_loop = loop_best / (n // 4)
    print(f"one raw round trip (ping):                 {rt * 1e6:8.1f} us")
    print(f"small cases (softmax float32 [1, 8], 16 per request), per case:")
    print(f"  raw protocol (peer):                     {per_raw * 1e6:8.1f} us  (kernel {raw_k * 1e6:.1f} us)")
    print(f"  fuzz_op_client_side:                     {per_fz * 1e6:8.1f} us  (kernel {fz_k * 1e6:.1f} us)"
          f"  = {per_fz / per_raw:.2f}x raw")
    over = (per_fz - fz_k) - (per_raw - raw_k)
    print(f"  client overhead over raw:                {over * 1e6:8.1f} us  = {over / rt:.2f} round trips"
          f"  (goal < 2)")
    print(f"  get_test_batch + submit_output (1/case): {per_loop * 1e6:8.1f} us  = {per_loop / rt:.2f} round trips")

    # large tensors
    n_cols = 4096
    rows = max(1, (args.mib << 20) // (4 * n_cols))
    scale = max(1, -(-rows * n_cols // 262144))  # softmax's schema allows 262144 elements a case
    big = {"dtypes": ["float32"], "dims": {"R": [rows], "N": [n_cols]}, "attrs": {"dim": -1}, "layouts": False,
           "distribution": "regular", "element_budget_scale": scale}
    nbytes = rows * n_cols * 4
    plain = Client._options
    client._options = lambda *a: {**plain(*a), "element_budget_scale": scale}  # no public knob for it

    def client_big():
        case = client.get_test_batch(op, count=1, seed=3, dtypes=["float32"], dims={"R": rows, "N": n_cols},
                                     attrs={"dim": -1}, layouts=False, value_distribution="regular")[0]
        out = softmax(case["inputs"]["x"], -1)
        v = client.submit_output(op, case["inputs"], out, case["seed"])
        assert v.passed, v.message

    def raw_big():
        res, tens = raw_call(conn, "get_test_batch", {"op": op, "count": 1, "seed": 3, "options": big})
        c = res["cases"][0]
        d, shape, strides, offset, storage = tens["cases/0/x"]
        x = storage.view(np.float32).reshape(shape)
        out = softmax(x, -1)
        r, _ = raw_call(conn, "submit_outputs", {"op": op, "options": big, "items": [{"case": c}], "store": False,
                                                 "kernel": {"kind": "client", "name": "raw"}},
                        [("items/0/outputs/0", "float32", list(out.shape), [n_cols, 1], 0, out),
                         ("items/0/inputs/x", d, shape, strides, offset, storage)])
        assert r["results"][0]["passed"]

    x = np.random.default_rng(0).standard_normal((rows, n_cols)).astype(np.float32)
    k_best, _ = best(lambda: softmax(x, -1), args.repeat)
    raw_best_l, _ = best(raw_big, args.repeat)
    cl_best_l, _ = best(client_big, args.repeat)
    dst = np.empty_like(x)
    cp_best, _ = best(lambda: np.copyto(dst, x), args.repeat)
    moved = 3 * nbytes  # input out, input back (mutation check), output back
    print(f"large tensor (softmax float32 [{rows}, {n_cols}] = {nbytes / 2**20:.0f} MiB), batch + submit:")
    print(f"  raw protocol (peer):                     {raw_best_l * 1e3:8.1f} ms  "
          f"({moved / 2**20 / (raw_best_l - k_best):7.0f} MiB/s of tensors moved end to end (daemon generation, fp64 reference and judging included), kernel {k_best * 1e3:.1f} ms excluded)")
    print(f"  client get_test_batch + submit_output:   {cl_best_l * 1e3:8.1f} ms  "
          f"({moved / 2**20 / (cl_best_l - k_best):7.0f} MiB/s) = {cl_best_l / raw_best_l:.2f}x raw")
    print(f"  numpy memcpy of the input (ceiling):     {cp_best * 1e3:8.1f} ms  ({nbytes / 2**20 / cp_best:7.0f} MiB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
