"""A real JSON-RPC client of `gpuemu lsp` (LSP base protocol over the process's stdin/stdout), as
an editor is: requests with ids, notifications collected as they come, server requests answered."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional


def uri(path: Path) -> str:
    return Path(path).resolve().as_uri()


class LspClient:
    def __init__(self, argv: List[str], env: Dict[str, str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self._next = 0
        self._wlock = threading.Lock()
        self._replies: Dict[Any, dict] = {}
        self._notes: List[dict] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self.stderr_lines: List[str] = []
        threading.Thread(target=self._stderr_loop, daemon=True).start()

    # --- the wire -------------------------------------------------------------------------------
    def send(self, message: dict) -> None:
        self.send_raw(json.dumps(message).encode())

    def send_raw(self, body: bytes) -> None:
        with self._wlock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def _read_loop(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            msg = json.loads(out.read(length))
            with self._cv:
                if "id" in msg and "method" in msg:  # a request of the server: answer it
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                    self._notes.append(msg)
                elif "id" in msg:
                    self._replies[msg["id"]] = msg
                else:
                    self._notes.append(msg)
                self._cv.notify_all()

    def _stderr_loop(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode(errors="replace"))

    # --- requests and notifications -------------------------------------------------------------
    def request(self, method: str, params: Any = None, timeout: float = 120) -> dict:
        """The whole reply message (with "result" or "error")."""
        self._next += 1
        rid = self._next
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        deadline = time.time() + timeout
        with self._cv:
            while rid not in self._replies:
                left = deadline - time.time()
                assert left > 0, f"no reply to {method} within {timeout} s; stderr: {''.join(self.stderr_lines)}"
                self._cv.wait(left)
            return self._replies.pop(rid)

    def result(self, method: str, params: Any = None, timeout: float = 120) -> Any:
        r = self.request(method, params, timeout)
        assert "error" not in r, f"{method}: {r['error']}"
        return r["result"]

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params or {}})

    def notes(self, method: str) -> List[dict]:
        with self._cv:
            return [n["params"] for n in self._notes if n.get("method") == method]

    def wait_note(self, method: str, pred: Callable[[dict], bool] = lambda p: True,
                  timeout: float = 60, after: int = 0) -> dict:
        """The first notification `method` (from the `after`-th on) whose params satisfy pred."""
        deadline = time.time() + timeout
        with self._cv:
            while True:
                seen = [n["params"] for n in self._notes if n.get("method") == method]
                for p in seen[after:]:
                    if pred(p):
                        return p
                left = deadline - time.time()
                assert left > 0, (f"no {method} matching within {timeout} s; got {seen[after:][-3:]}; "
                                  f"stderr: {''.join(self.stderr_lines)}")
                self._cv.wait(left)

    def count(self, method: str) -> int:
        return len(self.notes(method))

    def diagnostics(self, path: Path) -> Optional[list]:
        """The last diagnostics published for a file (None when none were)."""
        u = uri(path)
        last = None
        for p in self.notes("textDocument/publishDiagnostics"):
            if p["uri"] == u:
                last = p["diagnostics"]
        return last

    def wait_diagnostics(self, path: Path, pred: Callable[[list], bool], timeout: float = 60) -> list:
        u = uri(path)
        return self.wait_note("textDocument/publishDiagnostics",
                              lambda p: p["uri"] == u and pred(p["diagnostics"]), timeout)["diagnostics"]

    # --- lifecycle ------------------------------------------------------------------------------
    def initialize(self, root: Path, **options: Any) -> dict:
        r = self.result("initialize", {"processId": None, "rootUri": uri(root),
                                       "capabilities": {"window": {"showDocument": {"support": True}}},
                                       "initializationOptions": options})
        self.notify("initialized", {})
        return r

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.request("shutdown", timeout=30)
                self.notify("exit")
            except (AssertionError, BrokenPipeError, OSError):
                pass
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode
