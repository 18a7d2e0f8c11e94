"""One central daemon and two worker hosts, each in a network namespace of its own joined to the
central one by a veth link (issue 19, docs/scale.md): the workers fuzz with their own local daemons,
which push to the central daemon over tcp with its token. Meanwhile a worker's daemon is killed
mid-run (and started again), a link is cut and restored, and the central daemon is restarted. At
the end, every failure any worker's daemon acknowledged (its store holds it) is in the central store
exactly once, and every run summary too.

Needs root (CI runs as root) for `ip netns` and veth links; the namespaces are torn down after."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from daemon_harness import DAEMON, GPUEMU, alive, decode_header, encode_frame, kill_hard

TOKEN = "token-of-the-central-daemon-0123456789"
PORT = 47000 + os.getpid() % 1000

if os.geteuid() != 0:
    pytest.skip("needs root to create network namespaces (ip netns); CI runs as root",
                allow_module_level=True)
if shutil.which("ip") is None:
    pytest.fail("iproute2's ip is missing: scripts/install-deps.sh installs it", pytrace=False)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, f"{' '.join(args)}: {r.stderr}"
    return r


class Host:
    """A network namespace with a gpuemu home; its daemon and CLI run inside it."""

    def __init__(self, ns: str, home: Path):
        self.ns, self.home = ns, home
        self.env = dict(os.environ, GPUEMU_HOME=str(home), NO_COLOR="1")
        self.env.pop("GPUEMU_DAEMON", None)

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns, *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return self.run(GPUEMU, *args, timeout=timeout)

    def cli_json(self, *args: str, rc: int | None = 0, timeout: float = 300):
        r = self.cli(*args, "--json", timeout=timeout)
        if rc is not None:
            assert r.returncode == rc, f"{self.ns}: gpuemu {' '.join(args)} exited {r.returncode}: {r.stderr}"
        return json.loads(r.stdout)

    def start(self, *args: str) -> None:
        r = self.run(DAEMON, "--home", str(self.home), *args, timeout=60)
        assert r.returncode == 0, f"{self.ns}: {r.stderr}"
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.cli("daemon", "status").returncode == 0:
                return
            time.sleep(0.05)
        raise AssertionError(f"the daemon in {self.ns} did not answer")

    @property
    def pid(self) -> int | None:
        try:
            return int(json.loads((self.home / "run" / "daemon.json").read_text())["pid"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None

    def stop(self) -> None:
        pid = self.pid
        self.cli("daemon", "stop", timeout=90)
        if pid and alive(pid):
            kill_hard(pid)

    def failure_ids(self) -> list[str]:
        return [f["id"] for f in self.cli_json("failures", "list")]

    def run_ids(self) -> list[str]:
        """The ids of the runs this host's daemon stored (the `runs` request, as raw frames)."""
        r = subprocess.run(["ip", "netns", "exec", self.ns, GPUEMU, "daemon", "raw"], env=self.env,
                           input=encode_frame({"v": 1, "method": "runs"}), capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return [x["id"] for x in decode_header(r.stdout)["result"]["runs"]]

    def log(self) -> str:
        p = self.home / "logs" / "daemon.log"
        return p.read_text() if p.exists() else "(no log)"


def wait_for_pending(h: Host) -> dict:
    """The push status once h's daemon has records queued and its last push failed."""
    deadline = time.time() + 30
    status: dict = {}
    while time.time() < deadline:
        status = h.cli_json("push", "status")
        if status["pending"] > 0 and status["last_error"]:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{h.ns}: nothing pending with an error after 30 s: {status}")


@pytest.fixture()
def hosts(tmp_path, request):
    tag = f"ge{os.getpid() % 100000}"
    names = {"c": f"{tag}c", "a": f"{tag}a", "b": f"{tag}b"}
    subnet = 10 + os.getpid() % 200
    made: list[str] = []
    try:
        for ns in names.values():
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        links = {}
        for i, w in enumerate(("a", "b"), start=1):
            c_if, w_if = f"{tag}{w}0", f"{tag}{w}1"
            sh("ip", "link", "add", c_if, "netns", names["c"], "type", "veth", "peer", "name", w_if,
               "netns", names[w])
            sh("ip", "-n", names["c"], "addr", "add", f"10.{subnet}.{i}.1/24", "dev", c_if)
            sh("ip", "-n", names[w], "addr", "add", f"10.{subnet}.{i}.2/24", "dev", w_if)
            sh("ip", "-n", names["c"], "link", "set", c_if, "up")
            sh("ip", "-n", names[w], "link", "set", w_if, "up")
            links[w] = (w_if, f"tcp://10.{subnet}.{i}.1:{PORT}")
        tf = tmp_path / "token"
        tf.write_text(TOKEN + "\n")
        central = Host(names["c"], tmp_path / "central")
        workers = {w: Host(names[w], tmp_path / f"worker-{w}") for w in ("a", "b")}
        yield central, workers, links, tf
    finally:
        rep = getattr(request.node, "rep_call", None)
        for h in [locals().get("central")] + list((locals().get("workers") or {}).values()):
            if h is None:
                continue
            if rep is not None and rep.failed:
                print(f"---- {h.ns} log ----\n" + h.log())
            h.stop()
        for ns in made:
            sh("ip", "netns", "del", ns, check=False)


def test_every_acknowledged_failure_reaches_the_central_store_exactly_once(hosts):
    central, workers, links, tf = hosts
    central.start("--tcp", f"tcp://0.0.0.0:{PORT}", "--token-file", str(tf))

    def start_worker(w: str) -> None:
        workers[w].start("--push-to", links[w][1], "--push-token-file", str(tf), "--push-timeout", "3",
                         "--push-retry-max", "1", "--calibration-sync", "0")

    for w in workers:
        start_worker(w)
    a, b = workers["a"], workers["b"]
    runs_acknowledged = 0

    # 1. Both workers fuzz; their failures flow to the central daemon.
    for w, (op, kernel) in {"a": ("softmax", "tail_leak"), "b": ("matmul", "dropped_tail_k")}.items():
        rep = workers[w].cli_json("fuzz", op, "--kernel", kernel, "-n", "12", "--seed", "1", rc=1)
        assert rep["failure_ids"]
        runs_acknowledged += 1

    # 2. Worker b's link goes down while it stores failures (they wait in its outbox); then its
    #    daemon is killed mid-run (SIGKILL while its client waits on a fuzz), the link comes back
    #    and the daemon is started again: what it had acknowledged before the crash is pushed.
    b_if = links["b"][0]
    sh("ip", "-n", b.ns, "link", "set", b_if, "down")
    b.cli_json("fuzz", "softmax", "--kernel", "tail_leak", "-n", "10", "--seed", "3", rc=1)
    runs_acknowledged += 1
    waiting = wait_for_pending(b)
    running = subprocess.Popen(["ip", "netns", "exec", b.ns, GPUEMU, "fuzz", "matmul", "--kernel", "dropped_tail_k",
                                "-n", "400", "--seed", "2"], env=b.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    pid = b.pid
    assert pid and alive(pid)
    kill_hard(pid)
    running.wait(timeout=60)
    assert running.returncode != 0  # the client saw its daemon die
    sh("ip", "-n", b.ns, "link", "set", b_if, "up")
    start_worker("b")
    w = b.cli_json("push", "wait", "--timeout", "60", rc=None)
    assert w["drained"] is True, w
    st = w["status"]  # the records queued before the crash, pushed by the new daemon
    assert st["pushed_failures"] + st["pushed_runs"] + st["already_present"] >= waiting["pending"], (waiting, st)

    # 3. Worker a's link is cut: it keeps fuzzing and storing; its pushes fail and wait. Restored,
    #    they go through.
    a_if = links["a"][0]
    sh("ip", "-n", a.ns, "link", "set", a_if, "down")
    rep = a.cli_json("fuzz", "softmax", "--kernel", "tail_leak", "-n", "12", "--seed", "4", rc=1)
    runs_acknowledged += 1
    wait_for_pending(a)
    sh("ip", "-n", a.ns, "link", "set", a_if, "up")
    w = a.cli_json("push", "wait", "--timeout", "60", rc=None)
    assert w["drained"] is True, w

    # 4. The central daemon restarts while both workers store more; they catch up after.
    central.stop()
    for w, seed in (("a", "5"), ("b", "6")):
        workers[w].cli_json("fuzz", "softmax", "--kernel", "tail_leak", "-n", "10", "--seed", seed, rc=1)
        runs_acknowledged += 1
    time.sleep(1.0)
    assert a.cli_json("push", "status")["pending"] > 0
    central.start("--tcp", f"tcp://0.0.0.0:{PORT}", "--token-file", str(tf))
    for w in workers.values():
        r = w.cli_json("push", "wait", "--timeout", "90", rc=None)
        assert r["drained"] is True, r
        assert r["status"]["rejected"] == 0, r

    # Every failure any worker acknowledged is in the central store, exactly once.
    acknowledged = a.failure_ids() + b.failure_ids()
    assert len(set(acknowledged)) == len(acknowledged)  # no failure is on both workers
    at_central = central.failure_ids()
    assert len(at_central) == len(set(at_central))
    assert sorted(at_central) == sorted(acknowledged)
    # with where each came from
    origins = {central.cli_json("failures", "show", i)["pushed_from"]["home"] for i in at_central}
    assert origins == {str(a.home), str(b.home)}
    # and every run summary a worker stored
    worker_runs = a.run_ids() + b.run_ids()
    assert len(worker_runs) >= runs_acknowledged
    assert sorted(central.run_ids()) == sorted(worker_runs)
    for h in (a, b):
        s = h.cli_json("push", "status")
        assert s["pending"] == 0 and s["rejected"] == 0, s
