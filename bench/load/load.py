"""Load: many concurrent clients against one gpuemu-daemon (issue 15; docs/reliability.md, "Load").

    GPUEMU_BIN_DIR=build/bin .venv/bin/python -m bench.load.load --clients 8 32 --cases 200 --json load.json
    GPUEMU_BIN_DIR=build/bin .venv/bin/python -m bench.load.load --valgrind --clients 8 --cases 30
    GPUEMU_BIN_DIR=build/bin .venv/bin/python -m bench.load.load --heaptrack --clients 8 --cases 30

Starts one real gpuemu-daemon (``gpuemu-daemon --home H --foreground``, optionally under valgrind or
heaptrack) in a fresh temporary GPUEMU_HOME, then, for each client count N of ``--clients``, runs N
clients as separate OS processes (this module re-run with ``--worker`` by the same interpreter, from
the repository root), each with its own ``gpuemu.Client`` connection, all released at once once
every one has connected. Client ``c`` runs
``--cases`` cases, one ``get_test_batch`` per ``--batch`` cases of an op and one ``submit_output``
per case; each case's op (softmax or layer_norm) and whether the kernel is buggy (a correct float64
numpy kernel, or a wrong one: softmax doubled, layer_norm ``o + 0.25 + 0.1 |o|``) are drawn from a
``random.Random`` seeded with (c, case index): every client knows beforehand which verdict each case
must get (softmax cases draw adversarial values, layer_norm regular ones: see DISTRIBUTION). Then it runs ``--fuzz-cases`` cases more through ``fuzz_op_client_side`` (softmax,
correct for even clients, buggy for odd ones: the batched path with client-side diagnosis).

Checked, per client and across clients (exit status 1 when anything is off):

- every verdict is the expected one (buggy => failed, correct => passed), and carries the seed and
  index of the case it answers (the master seeds are distinct per client and op, so a verdict
  delivered to the wrong client or case shows up as a seed mismatch);
- exactly one verdict per submitted case: none lost (a request that raised counts as lost), none
  duplicated (the same seed twice);
- a failed verdict names a stored failure (``failure_id``), a passed one none; failure ids are
  unique across all clients;
- the daemon's store (``failures list``, read after each phase, or once at the end with
  ``--store-check end``) holds exactly the failures the
  clients expect, no more, no fewer, each with the seed, index, op and kernel name (which encodes
  the client index and the kernel: ``load_c007_softmax_bug``) of the case that produced it.

Measured: per-request latency of ``submit_output`` (one case) and ``get_test_batch`` (p50, p90,
p99, max, per client count), throughput (cases judged per second, from the release of the
clients to the last one done), and the daemon's memory sampled from /proc/PID/status every
0.2 s (VmRSS, RssAnon, RssFile: at the start, the peak and the end of each phase; RssFile
includes the LMDB store's mapped pages, RssAnon is where a heap leak would show).
``--rounds R`` repeats the whole list of client counts R times on the same daemon, so that a leak
shows as growth of the end-of-phase RssAnon from round to round.

``--valgrind`` runs the daemon under ``valgrind --leak-check=full`` (``--heaptrack``: heaptrack),
stops it with ``gpuemu daemon stop`` and reports the leak summary (definitely / indirectly /
possibly lost bytes; heaptrack: "leaked" bytes). Use fewer cases there: the daemon's cases/s drop
about 8x under valgrind here (tiny shapes by default there: ``--sizes tiny``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("GPUEMU_BIN_DIR", REPO / "build" / "bin"))
OPS = ("softmax", "layer_norm")
# Small shapes (at and around one tile): the benchmark loads the daemon's request path, not its
# fp64 arithmetic. "--sizes schema" uses the schemas' own ranges (up to 1M elements a case).
SMALL_DIMS = {"R": [1, 3, 16, 64], "N": [1, 7, 128, 129, 1000]}
TINY_DIMS = {"R": [1, 3, 8], "N": [1, 7, 129]}
# layer_norm's adversarial values include rows that are nearly constant at a large offset, where
# (x - mean) / sqrt(var + eps) is ill-conditioned and the envelope rightly wide: there even an
# output 10 % + 0.25 off passes (17 of 1500 cases). "regular" values keep every case decidable,
# so that each client knows its verdicts in advance; softmax keeps the adversarial ones.
DISTRIBUTION = {"softmax": "adversarial", "layer_norm": "regular"}


def master_seed(client: int, op: str, salt: int = 0) -> int:
    """Distinct per client, op and salt (a run of the test suite and a benchmark run differ)."""
    return 0x10AD_0000_0000 + salt * 1_000_003 + client * 16 + OPS.index(op)


def fuzz_seed(client: int, salt: int = 0) -> int:
    return 0x2FA2_0000_0000 + salt * 1_000_003 + client


def plan(client: int, cases: int, salt: int = 0) -> List[Dict[str, Any]]:
    """The client's cases: [{op, buggy}], deterministic in (client, case index)."""
    out = []
    for j in range(cases):
        r = random.Random(f"load:{salt}:{client}:{j}")
        out.append({"op": OPS[r.randrange(len(OPS))], "buggy": r.random() < 0.4})
    return out


def kernel_name(client: int, op: str, buggy: bool) -> str:
    return f"load_c{client:03d}_{op}_{'bug' if buggy else 'ok'}"


# ---------------------------------------------------------------------------------------------
# The kernels (run in the worker processes)


def _np():
    import numpy as np

    return np


def softmax_ok(inputs: Dict[str, Any]):
    np = _np()
    x = inputs["x"]
    xf = np.asarray(x, dtype=np.float64)
    m = xf.max(axis=inputs["dim"], keepdims=True)
    e = np.exp(xf - m)
    return (e / e.sum(axis=inputs["dim"], keepdims=True)).astype(x.dtype)


def layer_norm_ok(inputs: Dict[str, Any]):
    np = _np()
    x = inputs["x"]
    xf = np.asarray(x, dtype=np.float64)
    mu = xf.mean(-1, keepdims=True)
    var = ((xf - mu) ** 2).mean(-1, keepdims=True)
    o = (xf - mu) / np.sqrt(var + inputs["eps"])
    if inputs.get("weight") is not None:
        o = o * np.asarray(inputs["weight"], dtype=np.float64)
    if inputs.get("bias") is not None:
        o = o + np.asarray(inputs["bias"], dtype=np.float64)
    return o.astype(x.dtype)


def _bug(out, op: str):
    """The buggy kernel's output. softmax: twice the right one (a halved normaliser); 1.05x is
    not enough: a float16 row that is constant along N (an expanded input, stride 0) passes at
    N >= 1000 with 1.05x, at N = 4096 with 1.5x (the error model allows ~sqrt(N) u_in there).
    layer_norm: 10 % too large in magnitude and shifted by 0.25 (N = 1 without bias is all zeros: a
    scale alone would pass; o * 1.05 + 0.25 has a fixed point at -5, which float16 rounds onto)."""
    np = _np()
    o = np.asarray(out, dtype=np.float64)
    o = o * 2.0 if op == "softmax" else o + 0.25 + 0.1 * np.abs(o)
    return o.astype(out.dtype)


def make_kernel(client: int, op: str, buggy: bool):
    """A run_op whose qualname (the stored failure's kernel name) encodes client, op and bug."""
    base = softmax_ok if op == "softmax" else layer_norm_ok

    def kernel(inputs):
        out = base(inputs)
        return _bug(out, op) if buggy else out

    kernel.__name__ = kernel.__qualname__ = kernel_name(client, op, buggy)
    return kernel


# ---------------------------------------------------------------------------------------------
# The worker: one client process


def worker(spec: Dict[str, Any]) -> Dict[str, Any]:
    from gpuemu import Client

    c = int(spec["client"])
    salt = int(spec.get("salt", 0))
    dims = spec.get("dims")
    batch = int(spec.get("batch", 8))
    rep: Dict[str, Any] = {"client": c, "cases": [], "errors": [], "submit_ms": [], "batch_ms": [],
                           "fuzz": None, "pid": os.getpid()}
    client = Client(home=spec["home"], autostart=False, timeout=float(spec.get("timeout", 600)))
    rep["daemon_pid"] = client.hello.get("pid")
    kernels = {(op, b): make_kernel(c, op, b) for op in OPS for b in (False, True)}
    queues: Dict[str, List[Dict[str, Any]]] = {op: [] for op in OPS}
    next_index = {op: 0 for op in OPS}
    # ready: connected; wait for the parent's go (all clients start together)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        rep["errors"].append("no go from the parent")
        return rep
    t0 = time.perf_counter()
    for j, p in enumerate(plan(c, int(spec["cases"]), salt)):
        op, buggy = p["op"], p["buggy"]
        entry: Dict[str, Any] = {"j": j, "op": op, "buggy": buggy, "kernel": kernel_name(c, op, buggy)}
        rep["cases"].append(entry)
        try:
            if not queues[op]:
                t = time.perf_counter()
                got = client.get_test_batch(op, count=batch, seed=master_seed(c, op, salt),
                                            start_index=next_index[op], dims=dims,
                                            value_distribution=DISTRIBUTION[op])
                rep["batch_ms"].append((time.perf_counter() - t) * 1e3)
                next_index[op] += batch
                queues[op].extend(got)
            case = queues[op].pop(0)
            entry.update(seed=int(case["seed"]), index=int(case["index"]), dtype=case["dtype"],
                         master_seed=int(case["master_seed"]),
                         shape=list(case["inputs"]["x"].shape))
            args = dict(case["inputs"])
            args.update(case["attrs"])
            out = kernels[(op, buggy)](args)
            t = time.perf_counter()
            v = client.submit_output(op, case["inputs"], out, case["seed"], run_op=kernels[(op, buggy)])
            rep["submit_ms"].append((time.perf_counter() - t) * 1e3)
            entry["verdicts"] = [{"passed": bool(v.passed), "seed": int(v.seed), "index": int(v.index),
                                  "failure_id": v.failure_id, "message": v.message[:200]}]
        except Exception:  # noqa: BLE001 (a lost verdict: recorded, checked by the parent)
            entry["exception"] = traceback.format_exc()[-2000:]
    rep["cases_s"] = time.perf_counter() - t0
    nf = int(spec.get("fuzz_cases", 0))
    if nf > 0:
        buggy = c % 2 == 1
        k = kernels[("softmax", buggy)]
        fz: Dict[str, Any] = {"buggy": buggy, "kernel": kernel_name(c, "softmax", buggy), "iterations": nf,
                              "seed": fuzz_seed(c, salt)}
        try:
            t = time.perf_counter()
            res = client.fuzz_op_client_side("softmax", k, iterations=nf, seed=fuzz_seed(c, salt), dims=dims,
                                             value_distribution=DISTRIBUTION["softmax"], diagnose_limit=1)
            fz["ms"] = (time.perf_counter() - t) * 1e3
            fz.update(total=res.total, passed=res.passed,
                      failures=[{"id": f.id, "seed": int(f.seed), "index": int(f.index)} for f in res.failures])
        except Exception:  # noqa: BLE001
            fz["exception"] = traceback.format_exc()[-2000:]
        rep["fuzz"] = fz
    rep["wall_s"] = time.perf_counter() - t0
    return rep


# ---------------------------------------------------------------------------------------------
# The checks (pure functions of the reports and the store: tests/python/test_load.py feeds them
# tampered reports to show they fail)


def check_reports(reports: Sequence[Dict[str, Any]], n_clients: int, n_cases: int,
                  fuzz_cases: int = 0, salt: int = 0) -> Dict[str, Any]:
    """Per-client checks. Returns {errors: [...], expected_failures: {id: {...}}, counts}."""
    errors: List[str] = []
    expected: Dict[str, Dict[str, Any]] = {}
    counts = {"verdicts": 0, "expected_pass": 0, "expected_fail": 0, "wrong": 0, "lost": 0,
              "duplicated": 0, "misrouted": 0, "fuzz_cases": 0}
    by_client = {}
    for r in reports:
        if r.get("client") in by_client:
            errors.append(f"client {r.get('client')} reported twice")
        by_client[r.get("client")] = r
    for c in range(n_clients):
        r = by_client.get(c)
        if r is None:
            errors.append(f"client {c}: no report")
            counts["lost"] += n_cases
            continue
        for e in r.get("errors", []):
            errors.append(f"client {c}: {e}")
        want = plan(c, n_cases, salt)
        cases = r.get("cases", [])
        if len(cases) != n_cases:
            errors.append(f"client {c}: {len(cases)} cases reported, {n_cases} planned")
        seeds_seen: Dict[int, int] = {}
        next_index = {op: 0 for op in OPS}
        for j, p in enumerate(want):
            e = cases[j] if j < len(cases) else None
            exp_index = next_index[p["op"]]
            next_index[p["op"]] += 1
            if p["buggy"]:
                counts["expected_fail"] += 1
            else:
                counts["expected_pass"] += 1
            if e is None or e.get("exception") or not e.get("verdicts"):
                counts["lost"] += 1
                errors.append(f"client {c} case {j}: verdict lost"
                              + (f": {e['exception'].strip().splitlines()[-1]}" if e and e.get("exception") else ""))
                continue
            if e["op"] != p["op"] or e["buggy"] != p["buggy"]:
                errors.append(f"client {c} case {j}: ran {e['op']} buggy={e['buggy']}, planned {p}")
            if e.get("master_seed") != master_seed(c, p["op"], salt) or e.get("index") != exp_index:
                errors.append(f"client {c} case {j}: got case {e.get('master_seed')}:{e.get('index')}, "
                              f"expected {master_seed(c, p['op'], salt)}:{exp_index}")
            vs = e["verdicts"]
            counts["verdicts"] += len(vs)
            if len(vs) > 1:
                counts["duplicated"] += len(vs) - 1
                errors.append(f"client {c} case {j}: {len(vs)} verdicts")
            seed = e["seed"]
            if seed in seeds_seen:
                counts["duplicated"] += 1
                errors.append(f"client {c} case {j}: seed {seed} already judged for case {seeds_seen[seed]}")
            seeds_seen[seed] = j
            v = vs[0]
            if v["seed"] != seed or v["index"] != e["index"]:
                counts["misrouted"] += 1
                errors.append(f"client {c} case {j}: verdict for seed {v['seed']} index {v['index']}, "
                              f"submitted seed {seed} index {e['index']}")
            if v["passed"] == p["buggy"]:
                counts["wrong"] += 1
                errors.append(f"client {c} case {j} ({p['op']} {e.get('dtype')} {e.get('shape')}, "
                              f"{'buggy' if p['buggy'] else 'correct'}): passed={v['passed']}: {v['message']}")
            fid = v.get("failure_id")
            if v["passed"] and fid:
                errors.append(f"client {c} case {j}: passed but names failure {fid}")
            if not v["passed"]:
                if not fid:
                    errors.append(f"client {c} case {j}: failed without a stored failure id")
                elif fid in expected:
                    counts["duplicated"] += 1
                    errors.append(f"failure id {fid} returned to client {c} case {j} and to "
                                  f"client {expected[fid]['client']} case {expected[fid]['j']}")
                else:
                    expected[fid] = {"client": c, "j": j, "op": p["op"], "seed": seed, "index": e["index"],
                                     "kernel": kernel_name(c, p["op"], p["buggy"])}
        if fuzz_cases > 0:
            fz = r.get("fuzz") or {}
            buggy = c % 2 == 1
            if fz.get("exception") or "total" not in fz:
                counts["lost"] += fuzz_cases
                errors.append(f"client {c}: fuzz_op_client_side lost: {str(fz.get('exception', 'no result'))[-300:]}")
            else:
                counts["fuzz_cases"] += fz["total"]
                if fz["total"] != fuzz_cases:
                    errors.append(f"client {c}: fuzz judged {fz['total']} of {fuzz_cases} cases")
                if fz["passed"] != (0 if buggy else fuzz_cases):
                    counts["wrong"] += abs(fz["passed"] - (0 if buggy else fuzz_cases))
                    errors.append(f"client {c}: fuzz ({'buggy' if buggy else 'correct'}) passed "
                                  f"{fz['passed']}/{fz['total']}")
                idx = [f["index"] for f in fz["failures"]]
                if len(set(idx)) != len(idx):
                    counts["duplicated"] += len(idx) - len(set(idx))
                    errors.append(f"client {c}: fuzz failures repeat case indices")
                for f in fz["failures"]:
                    if f["id"] in expected:
                        counts["duplicated"] += 1
                        errors.append(f"fuzz failure id {f['id']} of client {c} also returned elsewhere")
                    expected[f["id"]] = {"client": c, "j": f"fuzz{f['index']}", "op": "softmax", "seed": f["seed"],
                                         "index": f["index"], "kernel": kernel_name(c, "softmax", buggy)}
    return {"errors": errors, "expected_failures": expected, "counts": counts}


def check_store(stored: Sequence[Dict[str, Any]], expected: Dict[str, Dict[str, Any]],
                known_before: Sequence[str] = ()) -> List[str]:
    """The store's failures (``failures list``) against those the clients expect: exactly the
    same ids, each with the seed, index, op and kernel name (hence client) of its case."""
    errors = []
    before = set(known_before)
    seen = set()
    for f in stored:
        fid = f.get("id")
        if fid in before:
            continue
        if fid in seen:
            errors.append(f"store lists {fid} twice")
        seen.add(fid)
        e = expected.get(fid)
        if e is None:
            errors.append(f"store holds {fid} ({f.get('op')} seed {f.get('seed')} kernel "
                          f"{(f.get('kernel') or {}).get('name')}) that no client expects")
            continue
        kname = (f.get("kernel") or {}).get("name")
        if (int(f.get("seed", -1)) != e["seed"] or int(f.get("index", -1)) != e["index"] or f.get("op") != e["op"]
                or kname != e["kernel"]):
            errors.append(f"store's {fid} is {f.get('op')} seed {f.get('seed')} index {f.get('index')} kernel "
                          f"{kname}; client {e['client']} case {e['j']} expects {e['op']} seed {e['seed']} "
                          f"index {e['index']} kernel {e['kernel']}")
    for fid, e in expected.items():
        if fid not in seen:
            errors.append(f"failure {fid} of client {e['client']} case {e['j']} is not in the store")
    return errors


# ---------------------------------------------------------------------------------------------
# The parent: daemon, client processes, sampling, report


def percentiles(xs: Sequence[float]) -> Dict[str, Any]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)

    def q(p: float) -> float:
        return s[min(len(s) - 1, max(0, int(round(p * (len(s) - 1)))))]

    return {"n": len(s), "p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "max": s[-1],
            "mean": statistics.fmean(s)}


def proc_cpu_s(pid: int) -> Optional[float]:
    """utime + stime of pid, in seconds."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def proc_mem(pid: int) -> Optional[Dict[str, int]]:
    """VmRSS, RssAnon, RssFile, VmHWM of pid in KiB (None when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    out = {}
    for key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
        m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
        if m:
            out[key] = int(m.group(1))
    return out


class MemSampler:
    def __init__(self, pid: int, period: float = 0.2):
        self.pid, self.period = pid, period
        self.samples: List[tuple] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            m = proc_mem(self.pid)
            if m:
                self.samples.append((time.time(), m))
            self._stop.wait(self.period)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()

    def window(self, t0: float, t1: float) -> Dict[str, Any]:
        w = [m for t, m in self.samples if t0 <= t <= t1]
        if not w:
            return {}
        return {k: {"start": w[0].get(k), "peak": max(m.get(k, 0) for m in w), "end": w[-1].get(k)}
                for k in ("VmRSS", "RssAnon", "RssFile")}


def gpuemu_cli(home: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUEMU_HOME=home, NO_COLOR="1")
    return subprocess.run([str(BIN_DIR / "gpuemu"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def wait_ready(home: str, proc: Optional[subprocess.Popen], timeout: float) -> Dict[str, Any]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the daemon exited with {proc.returncode} before answering")
        r = gpuemu_cli(home, "daemon", "status", "--json")
        if r.returncode == 0:
            return json.loads(r.stdout)
        time.sleep(0.2)
    raise RuntimeError(f"the daemon did not answer within {timeout:.0f} s")


class DaemonProc:
    """gpuemu-daemon --home H --foreground, optionally under valgrind or heaptrack."""

    def __init__(self, home: str, tool: Optional[str] = None, workdir: Optional[str] = None,
                 extra: Sequence[str] = ()):
        self.home, self.tool = home, tool
        self.workdir = Path(workdir or home)
        daemon = str(BIN_DIR / "gpuemu-daemon")
        if not os.access(daemon, os.X_OK):
            raise FileNotFoundError(f"{daemon} is missing (set GPUEMU_BIN_DIR)")
        cmd = [daemon, "--home", home, "--foreground", *extra]
        self.tool_log = None
        if tool == "valgrind":
            self.tool_log = self.workdir / "valgrind.log"
            cmd = ["valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect,possible",
                   "--num-callers=30", f"--log-file={self.tool_log}"] + cmd
        elif tool == "heaptrack":
            self.tool_log = self.workdir / "heaptrack.daemon"
            cmd = ["heaptrack", "-o", str(self.tool_log)] + cmd
        self.stderr_path = self.workdir / "daemon.stderr"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(self.stderr_path, "wb"),
                                     stderr=subprocess.STDOUT, env=dict(os.environ, GPUEMU_HOME=home),
                                     start_new_session=True)
        self.status = wait_ready(home, self.proc, 300 if tool else 30)
        self.pid = int(self.status["pid"])

    def stop(self, timeout: float = 300) -> Dict[str, Any]:
        t = time.time()
        r = gpuemu_cli(self.home, "daemon", "stop", timeout=timeout)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        return {"stop_rc": r.returncode, "stop_out": (r.stdout + r.stderr).strip()[-300:], "exit": rc,
                "stop_s": time.time() - t}

    def leak_report(self) -> Dict[str, Any]:
        if self.tool == "valgrind":
            text = self.tool_log.read_text() if self.tool_log.exists() else ""
            out: Dict[str, Any] = {"log": str(self.tool_log)}
            for kind in ("definitely lost", "indirectly lost", "possibly lost", "still reachable"):
                m = re.search(rf"{kind}: ([\d,]+) bytes in ([\d,]+) blocks", text)
                if m:
                    out[kind.replace(" ", "_")] = {"bytes": int(m.group(1).replace(",", "")),
                                                   "blocks": int(m.group(2).replace(",", ""))}
            m = re.search(r"ERROR SUMMARY: ([\d,]+) errors", text)
            if m:
                out["errors"] = int(m.group(1).replace(",", ""))
            if "All heap blocks were freed" in text:
                out["all_freed"] = True
            # the loss records' first frames, to name where a leak comes from
            out["definite_records"] = re.findall(r"\n==\d+== ([\d,]+ (?:\([\d,]+ direct, [\d,]+ indirect\) )?"
                                                 r"bytes in [\d,]+ blocks are definitely lost.*?)\n==\d+== \n",
                                                 text, re.S)[:5]
            return out
        if self.tool == "heaptrack":
            files = sorted(self.workdir.glob("heaptrack.daemon*"))
            out = {"files": [str(f) for f in files]}
            if files:
                r = subprocess.run(["heaptrack_print", "--print-leaks", "1", "--print-peaks", "0",
                                    "--print-allocators", "0", "--print-temporary", "0", str(files[-1])],
                                   capture_output=True, text=True, timeout=600)
                text = r.stdout
                (self.workdir / "heaptrack_print.txt").write_text(text + r.stderr)
                out["print"] = str(self.workdir / "heaptrack_print.txt")
                for key, pat in (("total_leaked", r"total memory leaked: ([\d.]+)([KMGT]?B?)"),
                                 ("peak_heap", r"peak heap memory consumption: ([\d.]+)([KMGT]?B?)"),
                                 ("calls", r"calls to allocation functions: (\d+)")):
                    m = re.search(pat, text)
                    if m:
                        out[key] = m.group(1) + (m.group(2) if m.lastindex and m.lastindex > 1 else "")
            return out
        return {}


def run_phase(home: str, n_clients: int, n_cases: int, *, batch: int = 8, fuzz_cases: int = 16,
              dims: Optional[Dict[str, List[int]]] = None, salt: int = 0, timeout: float = 1800,
              sampler: Optional[MemSampler] = None, log=print) -> Dict[str, Any]:
    """N client processes against the daemon of home; their reports, checked, with latencies."""
    specs = [{"client": c, "home": home, "cases": n_cases, "batch": batch, "fuzz_cases": fuzz_cases,
              "dims": dims, "salt": salt} for c in range(n_clients)]
    env = dict(os.environ, GPUEMU_HOME=home, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = []
    t_spawn = time.time()
    for s in specs:  # the same interpreter (so the same gpuemu), at the root, where "bench" is found
        procs.append(subprocess.Popen([sys.executable, "-m", "bench.load.load", "--worker", json.dumps(s)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=REPO))
    errors: List[str] = []
    for c, p in enumerate(procs):
        line = p.stdout.readline()
        if line.strip() != "ready":
            errors.append(f"client {c} did not connect: {line!r} {p.stderr.read()[-1000:] if p.poll() is not None else ''}")
    t_ready = time.time()
    cpu0 = proc_cpu_s(sampler.pid) if sampler is not None else None
    t0 = time.time()
    for p in procs:  # release all at once
        try:
            p.stdin.write("go\n")
            p.stdin.flush()
        except BrokenPipeError:
            pass
    reports = []
    outs = [None] * len(procs)

    def collect(i, p):
        try:
            outs[i] = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            outs[i] = p.communicate()

    threads = [threading.Thread(target=collect, args=(i, p)) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.time()
    cpu1 = proc_cpu_s(sampler.pid) if sampler is not None else None
    for c, (p, (out, err)) in enumerate(zip(procs, outs)):
        line = (out or "").strip().splitlines()[-1:] or [""]
        try:
            reports.append(json.loads(line[0]))
        except json.JSONDecodeError:
            errors.append(f"client {c} exited {p.returncode} without a report: {(err or '')[-1500:]}")
    chk = check_reports(reports, n_clients, n_cases, fuzz_cases, salt)
    errors += chk["errors"]
    submit = [x for r in reports for x in r.get("submit_ms", [])]
    batches = [x for r in reports for x in r.get("batch_ms", [])]
    fuzz_ms = [r["fuzz"]["ms"] for r in reports if r.get("fuzz") and "ms" in r["fuzz"]]
    judged = chk["counts"]["verdicts"] + chk["counts"]["fuzz_cases"]
    res = {"clients": n_clients, "cases_per_client": n_cases, "fuzz_cases_per_client": fuzz_cases,
           "batch": batch, "dims": dims, "salt": salt, "counts": chk["counts"],
           "cases_judged": judged, "wall_s": t1 - t0, "connect_s": t_ready - t_spawn,
           "throughput_cases_s": judged / (t1 - t0) if t1 > t0 else None,
           "submit_output_ms": percentiles(submit), "get_test_batch_ms": percentiles(batches),
           "fuzz_op_client_side_ms": percentiles(fuzz_ms),
           "client_wall_s": percentiles([r.get("wall_s", 0) for r in reports]),
           "expected_failures": chk["expected_failures"], "errors": errors, "t0": t0, "t1": t1,
           "reports": reports}
    if sampler is not None:
        res["daemon_mem_kib"] = sampler.window(t0 - 0.5, t1 + 0.5)
        if cpu0 is not None and cpu1 is not None:
            res["daemon_cpu_s"] = cpu1 - cpu0
    return res


def fmt_ms(p: Dict[str, Any]) -> str:
    if not p.get("n"):
        return "-"
    return f"p50 {p['p50']:.1f}  p90 {p['p90']:.1f}  p99 {p['p99']:.1f}  max {p['max']:.1f} ms (n={p['n']})"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--cases", type=int, default=200, help="get_test_batch + submit_output cases per client")
    ap.add_argument("--fuzz-cases", type=int, default=16, help="fuzz_op_client_side cases per client after those")
    ap.add_argument("--batch", type=int, default=8, help="cases per get_test_batch request")
    ap.add_argument("--sizes", choices=["small", "tiny", "schema"], default=None,
                    help="case shapes (default small; tiny under --valgrind/--heaptrack)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the client counts on the same daemon")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--keep-home", action="store_true")
    ap.add_argument("--store-check", choices=["phase", "end"], default="phase",
                    help="read the store back after each phase (default), or once after all of them (the "
                         "listing's own memory then stays out of the per-phase RSS figures)")
    ap.add_argument("--workers", type=int, default=None, help="gpuemu-daemon --workers (default: its own)")
    tool = ap.add_mutually_exclusive_group()
    tool.add_argument("--valgrind", action="store_true")
    tool.add_argument("--heaptrack", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        try:
            rep = worker(json.loads(a.worker))
        except Exception:  # noqa: BLE001
            rep = {"client": json.loads(a.worker).get("client"), "errors": [traceback.format_exc()[-2000:]]}
        print(json.dumps(rep), flush=True)
        return 0

    toolname = "valgrind" if a.valgrind else "heaptrack" if a.heaptrack else None
    sizes = a.sizes or ("tiny" if toolname else "small")
    dims = {"small": SMALL_DIMS, "tiny": TINY_DIMS, "schema": None}[sizes]
    home = tempfile.mkdtemp(prefix="gpuemu-load-")
    print(f"GPUEMU_HOME {home}  bin {BIN_DIR}  tool {toolname or '-'}  sizes {sizes}", flush=True)
    d = DaemonProc(home, toolname, extra=["--workers", str(a.workers)] if a.workers else ())
    sampler = MemSampler(d.pid).start()
    time.sleep(0.5)
    mem_start = proc_mem(d.pid)
    out: Dict[str, Any] = {"bin_dir": str(BIN_DIR), "tool": toolname, "sizes": sizes, "home": home,
                           "daemon_pid": d.pid, "daemon_version": d.status.get("version"),
                           "cores": os.cpu_count(), "phases": [], "mem_at_start_kib": mem_start}
    failed = False
    salt = 0
    all_expected: Dict[str, Dict[str, Any]] = {}
    run_since_ms = int(time.time() * 1000)
    try:
        for rnd in range(a.rounds):
            for n in a.clients:
                salt += 1
                print(f"\n== round {rnd + 1}: {n} clients x {a.cases} cases (+{a.fuzz_cases} fuzz) ==", flush=True)
                # the store is read back for this phase only (since_ms): listing every record of a
                # long run costs the daemon memory in proportion to the whole store
                since_ms = int(time.time() * 1000)
                ph = run_phase(home, n, a.cases, batch=a.batch, fuzz_cases=a.fuzz_cases, dims=dims, salt=salt,
                               sampler=sampler)
                ph["round"] = rnd + 1
                ph["mem_after_phase_kib"] = proc_mem(d.pid)
                if a.store_check == "phase":
                    stored = Client_failures(home, since_ms)
                    ph["errors"] += check_store(stored, ph["expected_failures"])
                    ph["stored_failures_new"] = len(stored)
                    ph["mem_after_store_check_kib"] = proc_mem(d.pid)
                else:
                    clash = set(all_expected) & set(ph["expected_failures"])
                    ph["errors"] += [f"failure id {i} returned in two phases" for i in sorted(clash)]
                    all_expected.update(ph["expected_failures"])
                    ph["stored_failures_new"] = len(ph["expected_failures"])
                del ph["expected_failures"], ph["reports"]
                cnt = ph["counts"]
                print(f"verdicts {cnt['verdicts']} (+{cnt['fuzz_cases']} fuzz)  expected pass {cnt['expected_pass']}"
                      f" fail {cnt['expected_fail']}  wrong {cnt['wrong']}  lost {cnt['lost']}  duplicated "
                      f"{cnt['duplicated']}  misrouted {cnt['misrouted']}  stored new {ph['stored_failures_new']}")
                print(f"wall {ph['wall_s']:.1f} s  throughput {ph['throughput_cases_s']:.1f} cases/s  "
                      f"(connect {ph['connect_s']:.1f} s)  daemon cpu {ph.get('daemon_cpu_s', 0):.1f} s")
                print(f"submit_output   {fmt_ms(ph['submit_output_ms'])}")
                print(f"get_test_batch  {fmt_ms(ph['get_test_batch_ms'])}")
                print(f"fuzz_op_client_side ({a.fuzz_cases} cases) {fmt_ms(ph['fuzz_op_client_side_ms'])}")
                mem = ph.get("daemon_mem_kib", {})
                for k in ("VmRSS", "RssAnon", "RssFile"):
                    if k in mem:
                        print(f"daemon {k:7s} start {mem[k]['start'] / 1024:.1f}  peak {mem[k]['peak'] / 1024:.1f}  "
                              f"end {mem[k]['end'] / 1024:.1f} MiB")
                for e in ph["errors"][:30]:
                    print("ERROR", e)
                if ph["errors"]:
                    print(f"({len(ph['errors'])} errors)")
                    failed = True
                out["phases"].append(ph)
        time.sleep(1.0)
        out["mem_at_end_kib"] = proc_mem(d.pid)
        if a.store_check == "end":
            stored = Client_failures(home, run_since_ms)
            errs = check_store(stored, all_expected)
            out["store_check"] = {"stored": len(stored), "expected": len(all_expected), "errors": errs,
                                  "mem_after_kib": proc_mem(d.pid)}
            print(f"\nstore check (end): {len(stored)} stored, {len(all_expected)} expected, {len(errs)} errors")
            for e in errs[:30]:
                print("ERROR", e)
            failed = failed or bool(errs)
        out["daemon_stats"] = _stats(home)
    finally:
        sampler.stop()
        if sampler.samples:
            out["mem_overall_kib"] = {k: {"start": sampler.samples[0][1].get(k),
                                          "peak": max(m.get(k, 0) for _, m in sampler.samples),
                                          "end": sampler.samples[-1][1].get(k)}
                                      for k in ("VmRSS", "RssAnon", "RssFile")}
        out["stop"] = d.stop()
        out["leaks"] = d.leak_report()
    print("\nper phase: round clients  cases/s  submit p50/p99 ms  daemon RssAnon end / after the phase's store check (MiB)")
    for ph in out["phases"]:
        m = ph.get("daemon_mem_kib", {}).get("RssAnon", {})
        after = (ph.get("mem_after_store_check_kib") or ph.get("mem_after_phase_kib") or {}).get("RssAnon", 0)
        print(f"  {ph['round']:5d} {ph['clients']:7d}  {ph['throughput_cases_s']:7.1f}  "
              f"{ph['submit_output_ms'].get('p50', 0):7.1f} / {ph['submit_output_ms'].get('p99', 0):7.1f}  "
              f"{(m.get('end') or 0) / 1024:8.1f} / {after / 1024:.1f}")
    print("\ndaemon memory over the run (MiB): " + "  ".join(
        f"{k} {v['start'] / 1024:.1f} -> peak {v['peak'] / 1024:.1f} -> {v['end'] / 1024:.1f}"
        for k, v in out.get("mem_overall_kib", {}).items()))
    print(f"daemon stop: {out['stop']}")
    if toolname:
        print(f"{toolname}: {json.dumps({k: v for k, v in out['leaks'].items() if k != 'definite_records'})}")
        for rec in out["leaks"].get("definite_records", []):
            print("definitely lost record:\n" + rec[:3000])
        if out["leaks"].get("definitely_lost", {}).get("bytes", 0) > 0:
            failed = True
    if out["stop"]["exit"] != 0:
        print(f"the daemon exited with {out['stop']['exit']}")
        failed = True
    out["ok"] = not failed
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(out, indent=1))
    if not a.keep_home and not toolname:
        shutil.rmtree(home, ignore_errors=True)
    print("OK" if not failed else "FAILED")
    return 0 if not failed else 1


def Client_failures(home: str, since_ms: int = 0) -> List[Dict[str, Any]]:  # noqa: N802
    """The stored failures of the daemon of home created since since_ms (failures list)."""
    from gpuemu import Client

    params = {"action": "list", "since_ms": int(since_ms)}
    return Client(home=home, autostart=False).request("failures", params)[0].get("failures", [])


def _stats(home: str) -> Dict[str, Any]:
    from gpuemu import Client

    try:
        return Client(home=home, autostart=False).stats()
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)}


if __name__ == "__main__":
    sys.exit(main())
