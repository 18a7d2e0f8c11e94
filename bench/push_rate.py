"""What one central daemon sustains (docs/scale.md, "Measured"): W worker daemons on this machine,
each with F stored failures of a real buggy kernel (softmax tail_leak: small snapshots; matmul
dropped_tail_k: large ones) and their runs, push them all at once to one central daemon over
loopback tcp. Prints failures/s and MB/s into the central store, the central daemon's CPU time per
failure, and a single failure's latency from a worker's store to the central store.

    GPUEMU_BIN_DIR=build/bin python3 -m bench.push_rate [--workers 1 2 4] [--cases 300] [--op softmax]

The peer named in the ratio is `gpuemu failures import` of the same records on the same central
daemon (one client, a JSON file with base64 snapshots): the air-gapped path.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BIN = Path(os.environ.get("GPUEMU_BIN_DIR", Path(__file__).resolve().parents[1] / "build" / "bin"))
GPUEMU, DAEMON = str(BIN / "gpuemu"), str(BIN / "gpuemu-daemon")
KERNELS = {"softmax": "tail_leak", "matmul": "dropped_tail_k"}
TOKEN = "bench-token-0123456789abcdef"


def env_of(home: Path) -> dict:
    e = dict(os.environ, GPUEMU_HOME=str(home), NO_COLOR="1")
    e.pop("GPUEMU_DAEMON", None)
    return e


def cli(home: Path, *args: str, ok=(0,)) -> dict:
    r = subprocess.run([GPUEMU, *args, "--json"], env=env_of(home), capture_output=True, text=True, timeout=900)
    assert r.returncode in ok, f"gpuemu {' '.join(args)}: {r.stderr}"
    return json.loads(r.stdout)


def daemon(home: Path, *args: str) -> None:
    r = subprocess.run([DAEMON, "--home", str(home), *args], env=env_of(home), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr


def stop(home: Path) -> None:
    subprocess.run([GPUEMU, "daemon", "stop"], env=env_of(home), capture_output=True, timeout=120)


def cpu_s(home: Path) -> float:
    pid = json.loads((home / "run" / "daemon.json").read_text())["pid"]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(root: Path, workers: int, cases: int, op: str) -> dict:
    tf = root / "token"
    tf.write_text(TOKEN + "\n")
    address = f"tcp://127.0.0.1:{free_port()}"
    central = root / f"central-{workers}"
    homes = [root / f"w{workers}-{i}" for i in range(workers)]
    failures, snapshot_bytes = 0, 0
    for i, h in enumerate(homes):  # fill each worker's store (not pushing yet)
        daemon(h)
        cli(h, "fuzz", op, "--kernel", KERNELS[op], "-n", str(cases), "--seed", str(100 + i), ok=(1,))
        listed = cli(h, "failures", "list")
        failures += len(listed)
        snapshot_bytes += sum(f.get("snapshot_bytes", f.get("input_bytes", 0)) for f in listed)
        stop(h)
    daemon(central, "--tcp", address, "--token-file", str(tf))
    for h in homes:
        daemon(h, "--push-to", address, "--push-token-file", str(tf), "--calibration-sync", "0")
    c0 = cpu_s(central)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([GPUEMU, "push", "backlog", "--json"], env=env_of(h), stdout=subprocess.DEVNULL)
             for h in homes]
    for p in procs:
        p.wait()
    for h in homes:
        w = cli(h, "push", "wait", "--timeout", "600")
        assert w["drained"], w
    took = time.perf_counter() - t0
    central_cpu = cpu_s(central) - c0
    stored = len(cli(central, "failures", "list"))
    assert stored == failures, (stored, failures)
    # latency of one failure: stored on worker 0, then in the central store
    h = homes[0]
    t1 = time.perf_counter()
    rep = cli(h, "fuzz", op, "--kernel", KERNELS[op], "-n", "1", "--seed", "999", "--dtype", "float32",
              "--no-minimize", ok=(0, 1))
    t_stored = time.perf_counter()
    cli(h, "push", "wait", "--timeout", "60")
    latency = time.perf_counter() - t_stored
    # the peer: export the central's records to a file and import them into a fresh daemon
    dump = root / f"export-{workers}.jsonl"
    subprocess.run([GPUEMU, "failures", "export", "--jsonl", "-o", str(dump)], env=env_of(central),
                   capture_output=True, check=True, timeout=900)
    fresh = root / f"import-{workers}"
    daemon(fresh)
    t2 = time.perf_counter()
    cli(fresh, "failures", "import", str(dump))
    import_s = time.perf_counter() - t2
    imported = len(cli(fresh, "failures", "list"))
    for x in [central, fresh, *homes]:
        stop(x)
    return {"workers": workers, "failures": failures, "snapshot_mb": snapshot_bytes / 1e6, "seconds": took,
            "failures_per_s": failures / took, "mb_per_s": snapshot_bytes / 1e6 / took,
            "central_cpu_ms_per_failure": 1000 * central_cpu / max(failures, 1),
            "latency_ms": 1000 * latency, "fuzz_to_stored_s": t_stored - t1, "had_failure": bool(rep.get("failed")),
            "import_failures_per_s": imported / import_s}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--op", default="softmax", choices=sorted(KERNELS))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuemu-push-") as d:
        print(f"{'workers':>7} {'failures':>8} {'MB':>7} {'s':>6} {'failures/s':>10} {'MB/s':>6} "
              f"{'central ms/failure':>18} {'latency ms':>10} {'import failures/s':>17} {'push/import':>11}")
        for w in a.workers:
            r = one_round(Path(d), w, a.cases, a.op)
            print(f"{r['workers']:>7} {r['failures']:>8} {r['snapshot_mb']:>7.1f} {r['seconds']:>6.2f} "
                  f"{r['failures_per_s']:>10.0f} {r['mb_per_s']:>6.1f} {r['central_cpu_ms_per_failure']:>18.2f} "
                  f"{r['latency_ms']:>10.0f} {r['import_failures_per_s']:>17.0f} "
                  f"{r['failures_per_s'] / r['import_failures_per_s']:>10.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
