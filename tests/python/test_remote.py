"""The CLI and the Python client reaching a daemon elsewhere over tcp:// with its token (issue 19,
docs/protocol.md "Remote clients"): `gpuemu --daemon tcp://HOST:PORT --token-file F`, $GPUEMU_DAEMON
as an address with $GPUEMU_TOKEN_FILE, and `Client(address=..., token_file=...)`. The daemon is a
real one listening on a loopback port; the clients run with a GPUEMU_HOME of their own where no
daemon runs, as on another machine, and must never start one there."""

from __future__ import annotations

import json
import socket
import subprocess

import numpy as np
import pytest

from daemon_harness import DAEMON, GPUEMU, daemon  # noqa: F401 (daemon: the fixture)

import gpuemu
from gpuemu import Client

TOKEN = "a-token-of-at-least-16-characters"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def remote(daemon, tmp_path):
    """(address, token file, the env of a client on "another machine") of a daemon with --tcp."""
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    r = subprocess.run([DAEMON, "--home", str(daemon.home), "--tcp", address, "--token-file", str(tf)],
                       env=daemon.env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    daemon.wait_ready()
    elsewhere = tmp_path / "elsewhere"
    env = dict(daemon.env, GPUEMU_HOME=str(elsewhere))
    return address, tf, env, elsewhere


def np_softmax(x, dim=-1):
    x32 = np.asarray(x, dtype=np.float32)
    e = np.exp(x32 - np.max(x32, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def test_the_cli_reaches_a_tcp_daemon_by_flag_and_by_environment(daemon, remote):
    address, tf, env, elsewhere = remote
    run = lambda *a, e=env: subprocess.run([GPUEMU, *a], env=e, capture_output=True, text=True, timeout=300)  # noqa: E731
    r = run("--daemon", address, "--token-file", str(tf), "fuzz", "softmax", "--kernel", "tail_leak", "-n", "6",
            "--seed", "3", "--json")
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout)
    assert rep["failed"] >= 1
    # stored by the remote daemon (read through its local socket), not by any daemon "here"
    ids = {f["id"] for f in daemon.cli_json("failures", "list")}
    assert set(rep["failure_ids"]) <= ids and rep["failure_ids"]
    assert not (elsewhere / "run" / "daemon.json").exists()
    # $GPUEMU_DAEMON as an address, the token from $GPUEMU_TOKEN_FILE
    listed = run("failures", "list", "--json", e=dict(env, GPUEMU_DAEMON=address, GPUEMU_TOKEN_FILE=str(tf)))
    assert listed.returncode == 0, listed.stderr
    assert {f["id"] for f in json.loads(listed.stdout)} == ids
    # without the token, or with a wrong one: refused, clearly, and nothing is started here
    r = run("--daemon", address, "failures", "list")
    assert r.returncode != 0 and "valid token is required" in r.stderr, r.stderr
    bad = tf.parent / "bad-token"
    bad.write_text("not-the-token-at-all-xxxxxxxx\n")
    r = run("--daemon", address, "--token-file", str(bad), "failures", "list")
    assert r.returncode != 0 and "valid token is required" in r.stderr, r.stderr
    r = run("--daemon", address, "--token-file", str(tf.parent / "missing"), "failures", "list")
    assert r.returncode != 0 and "cannot read a token from" in r.stderr, r.stderr
    r = run("--daemon", f"tcp://127.0.0.1:{free_port()}", "--token-file", str(tf), "failures", "list")
    assert r.returncode != 0 and "no gpuemu daemon answers on tcp://127.0.0.1:" in r.stderr, r.stderr
    assert not (elsewhere / "run" / "daemon.json").exists()


def test_the_python_client_reaches_a_tcp_daemon(daemon, remote, monkeypatch):
    address, tf, env, elsewhere = remote
    monkeypatch.setenv("GPUEMU_HOME", str(elsewhere))
    c = Client(address=address, token_file=tf)
    assert c.ping()["pong"] is True and not c.started_daemon
    r = c.fuzz_op_client_side("softmax", lambda i: np_softmax(i["x"], i["dim"]), iterations=20, dtypes=["float32"],
                              seed=4)
    assert r.passed == 20, r.summary()
    bad = c.fuzz_op_client_side("softmax", lambda i: np_softmax(i["x"], i["dim"]) * np.float32(1.05), iterations=4,
                                dtypes=["float32"], seed=4)
    assert bad.passed == 0 and all(f.id and f.snapshot for f in bad.failures)
    assert {f.id for f in bad.failures} <= {f["id"] for f in daemon.cli_json("failures", "list")}
    c.close()
    monkeypatch.setenv("GPUEMU_DAEMON", address)
    monkeypatch.setenv("GPUEMU_TOKEN", TOKEN)
    assert Client().ping()["pong"] is True  # $GPUEMU_DAEMON as an address
    monkeypatch.delenv("GPUEMU_TOKEN")
    with pytest.raises(gpuemu.GpuemuError, match="valid token is required"):
        Client(address=address)
    with pytest.raises(gpuemu.ValidationError, match="expected tcp://HOST:PORT"):
        Client(address="127.0.0.1:1")
    with pytest.raises(gpuemu.ValidationError, match="not both"):
        Client(address=address, socket="/tmp/x.sock")
    assert not (elsewhere / "run" / "daemon.json").exists()
