"""The Python client of gpuemu-daemon (docs/python.md; the wire protocol is docs/protocol.md).

:class:`Client` connects to the daemon of ``GPUEMU_HOME`` (starting one when none answers) through
the compiled ``_core.Connection`` (the C++ ``DaemonClient``). Client-side fuzzing runs the kernel
here, in this process, on the framework and device the caller picks; the daemon generates the
cases, judges the outputs against its fp64 reference and stores the failures::

    from gpuemu import Client
    client = Client()
    results = client.fuzz_op_client_side("softmax", run_op=lambda inputs: my_softmax(inputs["x"]))
    print(f"Passed: {results.passed}/{results.total}")
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _core, errors
from . import _frameworks as _fw
# The Client's concerns, one module each (docs/architecture.md, "The Python client"): the cases and
# their hand-off, client-side runs, gradients, and the daemon's other services. Names tests and
# tools import from here stay importable from here.
from ._client_cases import _Cases, _output_array, _outputs_of, _round_bits, _wire_input  # noqa: F401
from ._client_gradients import _RECOMPUTED_STATISTICS, _Gradients, _autograd_kernel  # noqa: F401
from ._client_runs import _CHUNK, ClientFailure, Verdict, _kernel_identity, _Runs  # noqa: F401
from ._client_state import _HandedOut, _OpCatalogue
from ._client_store import _Services
from .inprocess import FuzzResults

__all__ = ["Client", "ClientFailure", "FuzzResults", "Verdict"]


def _default_daemon() -> Optional[str]:
    """$GPUEMU_DAEMON, else $GPUEMU_BIN_DIR's, else the one an installed wheel carries (gpuemu/bin/),
    else the build tree's, else None (the C++ client then looks on PATH)."""
    env = os.environ.get("GPUEMU_DAEMON")
    if env and "://" not in env:  # an address there names the daemon to reach, not a binary
        return env
    here = Path(__file__).resolve().parent
    for d in (os.environ.get("GPUEMU_BIN_DIR"), here / "bin", here.parents[1] / "build" / "bin"):
        if d:
            cand = Path(d) / "gpuemu-daemon"
            if os.access(cand, os.X_OK):
                return str(cand)
    return None


class Client(_Runs, _Gradients, _Services, _Cases):
    """A connection to gpuemu-daemon.

    ``socket``: an ``ipc://`` or ``tcp://`` URL or a socket path (default: the daemon of
    ``home`` / ``$GPUEMU_HOME``). With ``autostart`` a daemon is started when none answers
    (``daemon_path``, else ``$GPUEMU_DAEMON``, else the one built next to this package, else
    ``PATH``); :class:`gpuemu.errors.ConnectError` when none can be reached or started.
    ``timeout`` bounds each request, in seconds (<= 0: no limit).

    One Client may be used from several threads: each request is a round trip of its own on the
    connection, and each run (``fuzz_op_client_side``) keeps its state in an object of its own, so
    runs go on side by side (docs/python.md, "Runs and threads").
    """

    def __init__(self, socket: Optional[str] = None, autostart: bool = True, timeout: float = 600.0,
                 home: Optional[str] = None, daemon_path: Optional[str] = None,
                 start_timeout: float = 20.0, address: Optional[str] = None,
                 token_file: Optional[Union[str, os.PathLike]] = None) -> None:
        """``address``: a daemon elsewhere, ``tcp://HOST:PORT`` or ``tls+tcp://HOST:PORT`` (one
        started with ``--tcp``), with its token from ``token_file`` (its first line), else
        ``$GPUEMU_TOKEN`` / ``$GPUEMU_TOKEN_FILE``; default: ``$GPUEMU_DAEMON`` when it is an
        address, else the local daemon of ``home`` (``$GPUEMU_HOME``), started when none runs.
        ``socket``: a local daemon's socket path (or any address, as ``address``)."""
        if address is not None and socket is not None:
            raise errors.ValidationError("give the daemon as address= or socket=, not both")
        url = address if address is not None else socket
        if url is not None and "://" not in url:
            if address is not None:
                raise errors.ValidationError(f"address={address!r}: expected tcp://HOST:PORT, "
                                             "tls+tcp://HOST:PORT or ipc://PATH")
            url = "ipc://" + os.path.abspath(url)
        self._conn: Optional[Any] = _core.Connection(home=None if home is None else str(home), socket_url=url,
                                      autostart=autostart, timeout_s=float(timeout),
                                      daemon_path=daemon_path or _default_daemon(),
                                      start_timeout_s=float(start_timeout),
                                      token_file=None if token_file is None else os.fspath(token_file))
        # What the Client keeps between calls (_client_state.py); what a run keeps is the run's.
        self._catalogue = _OpCatalogue()  # schemas, torch ops, in-process engines
        self._cases = _HandedOut()  # the cases get_test_batch handed out, for submit_output

    def close(self) -> None:
        """Closes this connection (the daemon goes on serving others). Idempotent; a request on a
        closed client raises :class:`gpuemu.errors.ConnectError`. ``with Client() as c:`` closes it
        at the end of the block."""
        self._conn = None
        self._cases.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _live(self) -> Any:
        if self._conn is None:
            raise errors.ConnectError("this Client is closed (Client.close() or the end of its with block)",
                                      "unavailable")
        return self._conn

    @property
    def hello(self) -> Dict[str, Any]:
        """The daemon's hello: version, protocol, capabilities, methods, pid, socket, home."""
        return self._live().hello

    @property
    def started_daemon(self) -> bool:
        return self._live().started_daemon

    def request(self, method: str, params: Optional[Dict[str, Any]] = None, tensors: Sequence = (),
                timeout: Optional[float] = None) -> Tuple[Dict[str, Any], Dict[str, tuple]]:
        """One request: (result, {key: (dtype, shape, strides, offset, uint8 storage)})."""
        header = json.dumps({"v": _core.PROTOCOL_VERSION, "method": method, "params": params or {}})
        reply, tens = self._live().call(header, list(tensors), timeout)
        h = json.loads(reply)
        if not h.get("ok", False):
            err = h.get("error", {})
            raise errors.error_from_code(err.get("code", "internal"), err.get("message", ""))
        return h.get("result", {}), {k: (d, s, st, o, b) for k, d, s, st, o, b in tens}

    def ping(self) -> Dict[str, Any]:
        return self.request("ping")[0]

    def stats(self) -> Dict[str, Any]:
        return self.request("stats")[0]
