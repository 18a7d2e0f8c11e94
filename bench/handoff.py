"""The hand-off of large tensors between the Python client and the daemon, inline (NNG ipc) against
shared memory (docs/protocol.md, "Shared memory"), with memcpy of the same sizes measured in the same
run (docs/performance.md, "The shared-memory hand-off").

    GPUEMU_BIN_DIR=build/bin .venv/bin/python -m bench.handoff [--sizes 1,8,64,256] [--repeat 5]

For each size S (MiB), the best of --repeat runs, alternating the two paths, each timed after one
untimed request of its own kind:
- memcpy: numpy copyto of S bytes into a buffer already faulted in (one thread): the ceiling.
- client -> daemon: a `ping` carrying one float32 tensor of S bytes, no tensor back: from the bytes
  of a numpy array here to a tensor of the daemon's (decoded, its own storage), and the reply.
- daemon -> client: `ping` with `echo: true` (the tensor comes back) minus the one-way request
  above: from the daemon's tensor to a numpy array here.
- round trip: the echo, 2 S bytes moved.
- the bound of one request: memcpy's time over memcpy's plus a bare ping's (the request's fixed
  cost), the most any path could reach at that size.
GB/s are S (or 2 S) over the time; ratios are against memcpy and against inline.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpuemu import Client

REPO = Path(__file__).resolve().parents[1]


def best(fn, repeat: int) -> float:
    t = float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - s)
    return t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,8,64,256", help="MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    bin_dir = Path(os.environ.get("GPUEMU_BIN_DIR", REPO / "build" / "bin")).resolve()
    with tempfile.TemporaryDirectory() as home:
        os.environ["GPUEMU_HOME"] = home
        clients = {}
        for path, flag in (("inline", "0"), ("shm", "1")):
            os.environ["GPUEMU_SHM"] = flag
            clients[path] = Client(home=home, daemon_path=str(bin_dir / "gpuemu-daemon"))
        assert clients["shm"]._conn.shm["enabled"], clients["shm"]._conn.shm["status"]
        try:
            # A request's fixed cost: a bare ping (no tensor), the best and the median of 200. No
            # size S can move faster than S over (memcpy of S + this), whatever the copies cost.
            pings = []
            for _ in range(201):
                s = time.perf_counter()
                clients["shm"].request("ping", {}, [])
                pings.append(time.perf_counter() - s)
            pings = sorted(pings[1:])
            t_ping = pings[0]
            print(f"bare ping: {t_ping * 1e3:.3f} ms best, {pings[len(pings) // 2] * 1e3:.3f} ms median")
            rows = []
            for mib in sizes:
                n = mib << 20
                src = np.random.default_rng(mib).integers(0, 256, n, dtype=np.uint8)
                dst = np.empty_like(src)
                np.copyto(dst, src)  # faulted in
                t_memcpy = best(lambda: np.copyto(dst, src), a.repeat)
                tensor = [("x", "float32", [n // 4], [1], 0, src)]
                res = {}
                for path, c in clients.items():
                    def one_way(c=c):
                        c.request("ping", {}, tensor)

                    def echo(c=c):
                        _, back = c.request("ping", {"echo": True}, tensor)
                        assert back["x"][4].nbytes == n
                        del back

                    one_way(), echo()  # warm: arenas made, pages faulted
                    res[path] = [[], []]
                for _ in range(a.repeat):  # alternate the paths
                    for path, c in clients.items():
                        def one_way(c=c):
                            c.request("ping", {}, tensor)

                        def echo(c=c):
                            _, back = c.request("ping", {"echo": True}, tensor)
                            del back

                        # each timed after one untimed run of its own kind: the other path's
                        # request just before leaves the daemon's heap in another state
                        one_way()
                        res[path][0].append(best(one_way, 1))
                        echo()
                        res[path][1].append(best(echo, 1))
                # the best of each (this 2-core machine is shared: a bare ping took 0.4 to 11 ms)
                res = {p: [min(v[0]), min(v[1])] for p, v in res.items()}
                check = clients["shm"].request("ping", {"echo": True}, tensor)[1]["x"][4]
                assert np.array_equal(check, src), "shared memory changed the bytes"
                del check
                rows.append((mib, t_memcpy, res))
            gb = lambda nbytes, t: nbytes / t / 1e9  # noqa: E731
            print(f"shm: {clients['shm']._conn.shm}")
            print("| MiB | memcpy GB/s | path | client->daemon GB/s (x memcpy) | daemon->client GB/s (x memcpy) "
                  "| round trip GB/s (x memcpy) |")
            print("|---:|---:|---|---:|---:|---:|")
            for mib, t_memcpy, res in rows:
                n = mib << 20
                m = gb(n, t_memcpy)
                for path in ("inline", "shm"):
                    one, echo = res[path]
                    back = echo - one
                    back_s = f"{gb(n, back):.2f} ({gb(n, back) / m:.2f}x)" if back > 0 else "(noise)"
                    print(f"| {mib} | {m:.2f} | {path} | {gb(n, one):.2f} ({gb(n, one) / m:.2f}x) | "
                          f"{back_s} | {gb(2 * n, echo):.2f} "
                          f"({gb(2 * n, echo) / m:.2f}x) |")
                i1, ie = res["inline"]
                s1, se = res["shm"]
                ratio_back = f"{(ie - i1) / (se - s1):.2f}x" if se > s1 and ie > i1 else "(noise)"
                print(f"|  |  | shm / inline | {i1 / s1:.2f}x | {ratio_back} | {ie / se:.2f}x |")
                bound = t_memcpy / (t_memcpy + t_ping)
                print(f"|  |  | bound of one request: memcpy / (memcpy + bare ping) | {bound:.2f}x | {bound:.2f}x | "
                      f"{2 * t_memcpy / (2 * t_memcpy + t_ping):.2f}x |")
        finally:
            clients["shm"].request("shutdown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
