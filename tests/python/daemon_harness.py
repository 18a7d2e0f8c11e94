"""A real gpuemu-daemon in a temporary GPUEMU_HOME, driven through the real CLI binaries.

As in watchman's harness: each test gets its own home (socket, store, logs), the daemon is started
through the CLI and polled until it answers, and its log is printed when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import time
from pathlib import Path
from typing import Iterator, Optional

import pytest

BIN_DIR = Path(os.environ.get("GPUEMU_BIN_DIR", Path(__file__).resolve().parents[2] / "build" / "bin"))
GPUEMU = str(BIN_DIR / "gpuemu")
DAEMON = str(BIN_DIR / "gpuemu-daemon")


class Daemon:
    def __init__(self, home: Path):
        self.home = home
        self.env = dict(os.environ, GPUEMU_HOME=str(home), NO_COLOR="1")

    # --- the CLI ---------------------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 600, check_json: bool = False) -> subprocess.CompletedProcess:
        r = subprocess.run([GPUEMU, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check_json:
            assert r.stdout.strip(), f"no JSON on stdout; stderr: {r.stderr}"
        return r

    def cli_json(self, *args: str, expect_rc: Optional[int] = 0, timeout: float = 600):
        r = self.cli(*args, "--json", timeout=timeout)
        if expect_rc is not None:
            assert r.returncode == expect_rc, f"gpuemu {' '.join(args)} exited {r.returncode}: {r.stderr}"
        return json.loads(r.stdout)

    def start(self) -> dict:
        s = self.cli_json("daemon", "start")
        self.wait_ready()
        return s

    def wait_ready(self, timeout: float = 20.0) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.cli("daemon", "status", "--json")
            if r.returncode == 0:
                return json.loads(r.stdout)
            time.sleep(0.05)
        raise AssertionError("the daemon did not answer within %.0f s" % timeout)

    @property
    def info(self) -> dict:
        return json.loads((self.home / "run" / "daemon.json").read_text())

    @property
    def pid(self) -> int:
        return int(self.info["pid"])

    @property
    def socket(self) -> Path:
        return self.home / "run" / "gpuemu.sock"

    def stop(self) -> None:
        self.cli("daemon", "stop", timeout=90)

    def log(self) -> str:
        p = self.home / "logs" / "daemon.log"
        return p.read_text() if p.exists() else "(no log)"

    # --- raw frames (what a client of any language sends) ----------------------------------------
    def raw_request(self, payload: bytes, timeout: float = 30) -> bytes:
        """Sends bytes as one request (`gpuemu daemon raw`); returns the reply's bytes."""
        r = subprocess.run([GPUEMU, "daemon", "raw"], env=self.env, input=payload, capture_output=True,
                           timeout=timeout)
        assert r.returncode == 0, r.stderr
        return r.stdout


@pytest.fixture
def daemon(tmp_path, monkeypatch, request) -> Iterator[Daemon]:
    """A daemon home of its own (not started: the test or the client's autostart starts it), set
    as this process's GPUEMU_HOME, with GPUEMU_DAEMON pointing at the build's daemon. Its log is
    printed when the test fails (tests/python/conftest.py keeps the report); it is stopped (and
    killed if it lingers) afterwards."""
    home = tmp_path / "home"
    monkeypatch.setenv("GPUEMU_HOME", str(home))
    monkeypatch.setenv("GPUEMU_DAEMON", DAEMON)
    d = Daemon(home)
    yield d
    shut_down(d, request)


def shut_down(d: Daemon, request=None, name: str = "daemon") -> None:
    """Stops d's daemon (killing it if it lingers); prints its log first when the test failed."""
    rep = getattr(request.node, "rep_call", None) if request is not None else None
    if rep is not None and rep.failed:
        print(f"---- {name} log ----\n" + d.log())
    try:
        pid = d.pid
    except (FileNotFoundError, json.JSONDecodeError):
        pid = None
    d.stop()
    if pid and alive(pid):
        kill_hard(pid)


def encode_frame(header: dict, tensors: Optional[list] = None) -> bytes:
    """A gpuemu frame (docs/protocol.md); tensors: [(key, dtype, shape, strides, offset, storage bytes)]."""
    tensors = tensors or []
    descs, payload = [], b""
    for key, dtype, shape, strides, offset, data in tensors:
        descs.append({"key": key, "dtype": dtype, "shape": shape, "strides": strides, "offset": offset,
                      "storage_nbytes": len(data), "data_offset": len(payload)})
        payload += data + b"\0" * ((-len(data)) % 64)
    h = dict(header)
    if descs:
        h["tensors"] = descs
    text = json.dumps(h).encode()
    head = b"GEMU" + struct.pack("<I", len(text)) + text
    head += b"\0" * ((-len(head)) % 64)
    return head + payload


def decode_header(frame: bytes) -> dict:
    assert frame[:4] == b"GEMU", frame[:64]
    (n,) = struct.unpack("<I", frame[4:8])
    return json.loads(frame[8:8 + n])


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone once all its threads have exited: the
    leader turns zombie before the others, which still hold the process's files; cli/cmd_daemon.cpp,
    process_alive)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def kill_hard(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 10), f"pid {pid} survived SIGKILL"
