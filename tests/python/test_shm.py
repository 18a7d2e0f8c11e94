"""The shared-memory hand-off of large tensors (docs/protocol.md, "Shared memory") against a real
daemon: the same cases and verdicts as the inline path, and nothing left behind when a client or
the daemon is killed (SIGKILL) while arenas are mapped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from daemon_harness import DAEMON, GPUEMU, alive, daemon, kill_hard, wait_gone  # noqa: F401 (daemon: the fixture)

from gpuemu import Client

pytestmark = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                reason="gpuemu / gpuemu-daemon not built")

THRESHOLD = 4096  # bytes: small, so that the fuzzer's usual cases cross it both ways


def np_softmax(x, dim=-1):
    x32 = np.asarray(x, dtype=np.float32)
    m = np.max(x32, axis=dim, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(x32 - m)
    out = e / np.sum(e, axis=dim, keepdims=True)
    return out.astype(x.dtype) if x.dtype == np.float16 else out


def client(monkeypatch, shm: bool) -> Client:
    monkeypatch.setenv("GPUEMU_SHM", "1" if shm else "0")
    monkeypatch.setenv("GPUEMU_SHM_MIN_BYTES", str(THRESHOLD))
    return Client()


def segments_mapped(pid: int) -> int:
    """Mappings of gpuemu arenas in process pid (memfds named gpuemu-shm)."""
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for line in f if "memfd:gpuemu-shm" in line)


def dev_shm_entries() -> set:
    return {p for p in os.listdir("/dev/shm") if "gpuemu" in p} if os.path.isdir("/dev/shm") else set()


def wait_for(predicate, timeout=10.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_shared_memory_is_negotiated_and_gives_the_inline_bytes_and_verdicts(daemon, monkeypatch):
    shm, inline = client(monkeypatch, True), client(monkeypatch, False)
    assert shm._conn.shm["enabled"], shm._conn.shm["status"]
    assert shm._conn.shm["min_bytes"] == THRESHOLD
    assert not inline._conn.shm["enabled"] and inline._conn.shm["status"] == "off: GPUEMU_SHM=0"
    assert "tensors.shm" in shm.hello["capabilities"]

    # daemon -> client: a batch of cases, bit for bit (every tensor, large or not)
    params = {"op": "softmax", "count": 12, "seed": 21, "options": {"layouts": True}}
    r1, t1 = shm.request("get_test_batch", params)
    r2, t2 = inline.request("get_test_batch", params)
    assert r1 == r2
    assert t1.keys() == t2.keys() and t1
    sizes = [t[4].nbytes for t in t1.values()]
    assert min(sizes) < THRESHOLD <= max(sizes), sizes  # both sides of the threshold
    for k in t1:
        assert t1[k][:4] == t2[k][:4], k
        assert np.array_equal(t1[k][4], t2[k][4]), k
    assert shm._conn.shm["received_tensors"] == sum(1 for s in sizes if s >= THRESHOLD)

    # client -> daemon -> client: storages around the threshold, echoed by ping
    rng = np.random.default_rng(5)
    tensors = []
    for n in (THRESHOLD - 64, THRESHOLD - 4, THRESHOLD, THRESHOLD + 4, 3 << 20):
        data = rng.integers(0, 256, n, dtype=np.uint8)  # any bits: NaN payloads included
        tensors.append((f"t{n}", "float32", [n // 4], [1], 0, data))
    before = dict(shm._conn.shm)
    _, back = shm.request("ping", {"echo": True}, tensors)
    after = shm._conn.shm
    assert after["sent_tensors"] - before["sent_tensors"] == 3
    assert after["received_tensors"] - before["received_tensors"] == 3
    for key, dtype, shape, strides, offset, data in tensors:
        assert back[key][:4] == (dtype, shape, strides, offset)
        assert np.array_equal(back[key][4], data), key

    # verdicts through shared memory are those of the inline path (a correct and a buggy kernel)
    for kernel in (lambda i: np_softmax(i["x"], i["dim"]), lambda i: np_softmax(i["x"], i["dim"]) * np.float32(1.01)):
        a = shm.fuzz_op_client_side("softmax", kernel, iterations=24, seed=8, diagnose_limit=0)
        b = inline.fuzz_op_client_side("softmax", kernel, iterations=24, seed=8, diagnose_limit=0)
        assert (a.total, a.passed, a.first_failure, a.worst_ratio) == (b.total, b.passed, b.first_failure, b.worst_ratio)
        assert [(f.index, f.max_error) for f in a.failures] == [(f.index, f.max_error) for f in b.failures]
    assert shm._conn.shm["sent_tensors"] > after["sent_tensors"]  # the run's outputs went through arenas


HOLDER = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from gpuemu import Client
    c = Client()
    _, cases = c.request("get_test_batch", {"op": "softmax", "count": 8, "seed": 3})
    c.request("ping", {"echo": True}, [("x", "float32", [1 << 20], [1], 0, np.ones(1 << 20, np.float32))])
    assert c._conn.shm["enabled"] and c._conn.shm["received_tensors"] > 0, c._conn.shm
    print(c.hello["pid"], flush=True)
    time.sleep(600)
""")


def start_holder(daemon) -> tuple:
    env = dict(os.environ, GPUEMU_SHM="1", GPUEMU_SHM_MIN_BYTES=str(THRESHOLD))
    p = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.strip(), "the holder did not start"
    return p, int(line)


def test_a_client_killed_mid_run_leaves_no_segment_behind(daemon):
    before = dev_shm_entries()
    holder, daemon_pid = start_holder(daemon)
    try:
        assert segments_mapped(daemon_pid) > 0  # the daemon maps the holder's arenas ...
        held = sum(1 for fd in os.listdir(f"/proc/{holder.pid}/fd")
                   if "memfd:gpuemu-shm" in os.readlink(f"/proc/{holder.pid}/fd/{fd}"))
        assert held >= 2  # its request and reply arenas
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        # ... and drops them once the pipe closes: the kernel frees the memfds then.
        assert wait_for(lambda: segments_mapped(daemon_pid) == 0), segments_mapped(daemon_pid)
        assert dev_shm_entries() == before  # memfds never had a name there
        # the daemon goes on serving, shared memory included
        assert daemon.cli("daemon", "status").returncode == 0
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_daemon_killed_leaves_nothing_and_the_next_one_serves_shared_memory(daemon, monkeypatch):
    before = dev_shm_entries()
    holder, daemon_pid = start_holder(daemon)
    try:
        assert segments_mapped(daemon_pid) > 0
        kill_hard(daemon_pid)  # SIGKILL: no cleanup of its own runs
        assert dev_shm_entries() == before  # nothing of the daemon's persists
        # the next daemon starts on the same home, maps no one's arenas until asked ...
        daemon.start()
        new_pid = daemon.pid
        assert new_pid != daemon_pid
        assert wait_for(lambda: segments_mapped(new_pid) == 0)
        # ... and serves the hand-off again
        c = client(monkeypatch, True)
        _, t = c.request("get_test_batch", {"op": "softmax", "count": 8, "seed": 3})
        assert c._conn.shm["received_tensors"] > 0
        assert segments_mapped(new_pid) > 0
        c.close()
        del c, t
        import gc
        gc.collect()
        assert wait_for(lambda: segments_mapped(new_pid) == 0), segments_mapped(new_pid)
    finally:
        holder.kill()
        holder.wait(10)
    # the holder's own arenas went with it
    assert dev_shm_entries() == before
