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

import base64
import functools
import inspect
import json
import os
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core, errors
from . import _frameworks as _fw
from .dtypes import to_bits
from .inprocess import Failure, FuzzResults, _Kernel

__all__ = ["Client", "ClientFailure", "FuzzResults", "Verdict"]

_CHUNK = 16  # cases per get_test_batch / submit_outputs round trip

@dataclass
class ClientFailure(Failure):
    """A failing case of a client-side run: :class:`gpuemu.Failure` plus what the daemon stored.

    ``id`` is the stored failure's id (``gpuemu repro ID`` replays it), ``snapshot`` the base64 of
    the exact input bytes the daemon stored (a frame: docs/protocol.md), ``file``/``line`` where the
    kernel under test is defined.
    """

    snapshot: str = ""
    file: Optional[str] = None
    line: Optional[int] = None


@dataclass
class Verdict:
    """The daemon's judgement of one submitted case."""

    passed: bool
    max_error: Optional[float]
    envelope: Optional[float]
    message: str
    seed: int
    index: int
    diagnosis: Dict[str, Any] = field(default_factory=dict)
    failure_id: Optional[str] = None
    repro: Optional[str] = None

    def __bool__(self) -> bool:
        return self.passed


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


def _kernel_identity(run_op: Callable) -> Dict[str, Any]:
    """{"kind": "client", name, file, line} of run_op, or of the function a lambda calls."""
    fn = run_op
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn) if callable(fn) else fn
    target = fn
    code = getattr(fn, "__code__", None)
    if code is not None and fn.__name__ == "<lambda>":
        scope = dict(getattr(fn, "__globals__", {}))
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                scope[name] = cell.cell_contents
            except ValueError:
                pass
        names = code.co_names + code.co_freevars
        for name in names:
            cand = scope.get(name)
            if inspect.ismodule(cand):  # lambda inputs: kernels.softmax(...): the module's function
                cand = next((getattr(cand, a) for a in code.co_names
                             if inspect.isfunction(getattr(cand, a, None))), None)
            if inspect.isfunction(cand) or inspect.ismethod(cand):
                target = inspect.unwrap(cand)
                break
    try:
        file = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        file, line = None, None
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return {"kind": "client", "name": name, "file": file, "line": line}


# ---------------------------------------------------------------------------------------------
# Wire tensors <-> framework tensors (the adapters are gpuemu._frameworks)


def _round_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float values rounded once, from their own precision, to bfloat16/fp8 bits."""
    return to_bits(values.astype(np.float64), dtype)


def _output_array(v: Any, want: Optional[str]) -> Tuple[str, np.ndarray]:
    """(gpuemu dtype, contiguous numpy array) of one kernel output; float values for a
    bfloat16/fp8 output are rounded to it here, once."""
    return _fw.output_array(v, want, _round_bits)


def _pristine_copies(inputs: Dict[str, _fw.Input]) -> Dict[str, np.ndarray]:
    """Copies of the received storages a kernel is about to be handed itself (its writes land
    there), taken before it runs: what it left is compared with them afterwards, so an input it
    did not touch need not go back to the daemon."""
    return {n: inp.storage.copy() for n, inp in inputs.items() if not inp.immutable and inp.own is None}


def _wire_input(inp: _fw.Input, key: str, pristine: Optional[np.ndarray] = None) -> Optional[tuple]:
    """The input's storage as the kernel left it, for the daemon's mutation check (None for
    immutable JAX/TensorFlow arrays: nothing to check). Zero copy when the kernel's tensor views
    the received storage. None too when those bytes are the ones received: ``pristine`` (a copy
    taken before the kernel ran), or the received storage itself when the kernel was handed a
    copy of it (a device tensor, decoded bfloat16/fp8 values). Any difference, even one the
    daemon would not count (a NaN's payload, padding between strided elements), sends the input
    back, and the daemon's element-by-element check decides, as it does for every input a
    client sends."""
    if inp.immutable:
        return None
    data = inp.storage
    if inp.own is not None:
        host = inp.host_storage()
        if inp.dtype in _fw.BITS and host.dtype.kind == "f":
            data = to_bits(host.astype(np.float64), inp.dtype)
        else:
            data = np.ascontiguousarray(host)
    received = pristine if pristine is not None else inp.storage if inp.own is not None else None
    if received is not None and _core.same_bytes(received, data):
        return None
    return (key, inp.dtype, inp.shape, inp.strides, inp.offset, data)


def _outputs_of(result: Any) -> List[Any]:
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


# ---------------------------------------------------------------------------------------------


class Client:
    """A connection to gpuemu-daemon.

    ``socket``: an ``ipc://`` or ``tcp://`` URL or a socket path (default: the daemon of
    ``home`` / ``$GPUEMU_HOME``). With ``autostart`` a daemon is started when none answers
    (``daemon_path``, else ``$GPUEMU_DAEMON``, else the one built next to this package, else
    ``PATH``); :class:`gpuemu.errors.ConnectError` when none can be reached or started.
    ``timeout`` bounds each request, in seconds (<= 0: no limit).
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
        self._cases: Dict[Tuple[str, int], Tuple[Dict[str, Any], Dict[str, Any], Dict[str, _fw.Input]]] = {}

    # --- plumbing -------------------------------------------------------------------------------
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

    # --- cases ----------------------------------------------------------------------------------
    @staticmethod
    def _options(dtypes, value_distribution, dims, attrs, layouts, present=None, precision=None,
                 vary_attrs=None) -> Dict[str, Any]:
        o: Dict[str, Any] = {"distribution": value_distribution, "layouts": bool(layouts)}
        if vary_attrs:
            if isinstance(vary_attrs, str) or not all(isinstance(a, str) for a in vary_attrs):
                raise errors.ValidationError(f"vary_attrs must be a list of attr names, got {vary_attrs!r}")
            o["vary_attrs"] = list(vary_attrs)
        if dtypes is not None:
            o["dtypes"] = [dtypes] if isinstance(dtypes, str) else list(dtypes)
        if dims is not None:
            o["dims"] = {k: ([v] if isinstance(v, int) else list(v)) for k, v in dims.items()}
        if attrs is not None:
            o["attrs"] = dict(attrs)
        if present:
            if not isinstance(present, dict) or not all(isinstance(k, str) and isinstance(v, bool)
                                                        for k, v in present.items()):
                raise errors.ValidationError(f"present must map input names to True or False, got {present!r}")
            o["present"] = dict(present)
        if precision:
            if not isinstance(precision, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in precision.items()):
                raise errors.ValidationError(f"precision must map op or family names to policies, got {precision!r}")
            o["precision"] = dict(precision)
        return o

    def _with_absent(self, op: str, case: Dict[str, Any], args: Dict[str, Any]) -> Dict[str, Any]:
        """``args`` plus ``None`` for every input of the op the case left out (an optional input
        arrives under its name as ``None``, as PyTorch's own signatures take ``weight=None``)."""
        for spec in self._schema(op).get("inputs", []):
            args.setdefault(spec["name"], None)
        return args

    def _batch(self, op, options, seed, start, count, framework, device, keep_wire: bool = False,
               prefetch: int = 0, digests: bool = True, run: Optional[Dict[str, Any]] = None):
        """[(case json, {name: _fw.Input})] and the master seed (``keep_wire``: see _cases_of;
        ``prefetch``: the daemon generates that many cases after these meanwhile; ``digests``:
        the cases' JSON carries each input's digest, which the daemon hashes every byte for;
        ``run``: open a client-side run in the daemon, whose id is then ``self._run_id``)."""
        params = {"op": op, "count": count, "start_index": start, "options": options}
        if run is not None:
            params["run"] = run
        if prefetch > 0:
            params["prefetch"] = int(prefetch)
        if not digests:
            params["digests"] = False
        if seed is not None:
            params["seed"] = int(seed)
        res, tens = self.request("get_test_batch", params)
        self._run_id = res.get("run_id")
        return self._cases_of(res, tens, framework, device, keep_wire), int(res["master_seed"])

    @staticmethod
    def _cases_of(res, tens, framework, device, keep_wire: bool = False):
        """[(case json, {name: _fw.Input})] of a batch's reply (get_test_batch's, or the ``next``
        of a submit_outputs). ``keep_wire``: each case also carries a private copy of its wire
        inputs under ``case["_wire"]``, from which the same inputs are made again without asking
        the daemon (the determinism check's second run gets inputs no kernel has touched)."""
        out = []
        for i, c in enumerate(res["cases"]):
            inputs = {}
            wire = {}
            for name in c["inputs"]:
                d, shape, strides, offset, storage = tens[f"cases/{i}/{name}"]
                if keep_wire:
                    wire[name] = (d, shape, strides, offset, storage.copy())
                inputs[name] = _fw.make_input(framework, d, shape, strides, offset, storage, device)
            if keep_wire:
                c["_wire"] = wire
            out.append((c, inputs))
        return out

    @staticmethod
    def _framework(framework: Optional[str]) -> str:
        """The framework's name, checked (and imported) now: a missing one is a ValidationError
        naming the package to install."""
        f = framework or "numpy"
        _fw.require(f)
        return f

    def _schema(self, op: str) -> Dict[str, Any]:
        cache = self.__dict__.setdefault("_schemas", {})
        if op not in cache:
            try:
                from ._reference import op_schema

                cache[op] = op_schema(op)
            except Exception:  # noqa: BLE001 (an op only the daemon knows: it judges alone)
                cache[op] = {}
        return cache[op]

    def _expected(self, op: str, case: Dict[str, Any], inputs: Dict[str, _fw.Input]):
        """[(dtype, shape or None)] of the op's outputs for this case (from its schema)."""
        out = []
        for o in self._schema(op).get("outputs", []):
            d = o.get("dtype", "case")
            d = case["dtype"] if d == "case" else d
            spec = o.get("shape")
            shape = None
            if not _output_present(self._schema(op), o, inputs):
                continue  # shaped like an optional input the case lacks (layer_norm_backward's grad_weight)
            if isinstance(spec, str) and spec.startswith("like:") and spec[5:] in inputs:
                shape = list(inputs[spec[5:]].shape)
            elif isinstance(spec, list) and all(isinstance(s, (int, str)) for s in spec):
                dims = case.get("dims", {})
                if all(isinstance(s, int) or s in dims for s in spec):
                    shape = [s if isinstance(s, int) else int(dims[s]) for s in spec]
            out.append((d if isinstance(d, str) and not d.startswith("like:") else None, shape))
        return out

    def _run_item(self, op, run_op, case, inputs, i: int, check_determinism: bool, rebuild,
                  runs_here: bool = True) -> Tuple[dict, list]:
        """Runs the kernel on one case: (item json, wire tensors). ``runs_here``: ``run_op`` is the
        kernel itself, so the inputs it is handed can be copied before it runs (an input that
        comes back unchanged is then not sent); False when it only returns what a kernel already
        made (submit_output)."""
        args: Dict[str, Any] = self._with_absent(op, case, {n: inp.tensor for n, inp in inputs.items()})
        args.update(case.get("attrs", {}))
        item: Dict[str, Any] = {"case": case}
        tensors = []
        pristine = _pristine_copies(inputs) if runs_here else {}
        try:
            result = run_op(args)
        except Exception:  # noqa: BLE001 (a kernel's exception is a failure of the case)
            item["kernel_error"] = traceback.format_exc()
            return item, tensors
        try:
            expected = self._expected(op, case, inputs)
            values = _outputs_of(result)
            contract = ""
            ranges = [r for r in (_fw.memory_range(inp.tensor) for inp in inputs.values()) if r]
            for k, v in enumerate(values):
                r = _fw.memory_range(v)
                if r and any(lo < r[1] and r[0] < hi for lo, hi in ranges):
                    contract = f"output {k} aliases an input (a kernel must return new memory)"
                    break
            want = [e[0] for e in expected] + [None] * max(0, len(values) - len(expected))
            outs = [] if contract else [_output_array(v, want[k]) for k, v in enumerate(values)]
            if not contract and expected and len(values) != len(expected):
                contract = f"run_op returned {len(values)} outputs, the op has {len(expected)}"
            for k, (d, arr) in enumerate(outs):
                if contract or k >= len(expected):
                    break
                ed, es = expected[k]
                if es is not None and list(arr.shape) != es:
                    contract = f"output {k} has shape {list(arr.shape)}, expected {es}"
                elif ed is not None and d != ed:
                    contract = f"output {k} is {d}, expected {ed}"
            if not contract and check_determinism:
                again_inputs = rebuild()
                args2: Dict[str, Any] = self._with_absent(op, case, {n: inp.tensor for n, inp in again_inputs.items()})
                args2.update(case.get("attrs", {}))
                again = [_output_array(v, want[k]) for k, v in enumerate(_outputs_of(run_op(args2)))]
                for k, ((_, a), (_, b)) in enumerate(zip(outs, again)):
                    if a.tobytes() != b.tobytes():
                        contract = f"nondeterministic: output {k} differs bitwise between two runs"
                        break
        except Exception:  # noqa: BLE001
            item["kernel_error"] = traceback.format_exc()
            return item, tensors
        if contract:
            item["contract_error"] = contract
            return item, tensors
        for k, (d, arr) in enumerate(outs):
            strides = [s // arr.itemsize for s in arr.strides] if arr.ndim else []
            tensors.append((f"items/{i}/outputs/{k}", d, list(arr.shape), strides, 0, arr))
        for name, inp in inputs.items():
            wired = _wire_input(inp, f"items/{i}/inputs/{name}", pristine.get(name))
            if wired is not None:
                tensors.append(wired)
        return item, tensors

    # --- client-side fuzzing --------------------------------------------------------------------
    def fuzz_op_client_side(self, op: str, run_op: Callable[[Dict[str, Any]], Any], iterations: int = 100,
                            value_distribution: str = "adversarial", dtypes: Optional[Sequence[str]] = None,
                            seed: Optional[int] = None, framework: Optional[str] = None,
                            device: Optional[str] = None, dims: Optional[Dict[str, Any]] = None,
                            attrs: Optional[Dict[str, Any]] = None, layouts: bool = True,
                            fail_fast: bool = False, progress: Optional[Callable[[int, int], None]] = None,
                            check_determinism: bool = False, diagnose_limit: int = 3,
                            present: Optional[Dict[str, bool]] = None,
                            precision: Optional[Dict[str, str]] = None,
                            vary_attrs: Optional[Sequence[str]] = None,
                            backward: bool = False) -> FuzzResults:
        """Fuzzes ``op`` against ``run_op`` run here (docs/python.md). ``run_op`` gets every input by
        its schema name as a ``framework`` tensor on ``device`` with the case's real strides (an
        optional input the case leaves out as ``None``), and every attr by name; it returns a
        tensor (or a tuple for multi-output ops). ``present`` pins optional inputs the kernel
        always (``True``) or never (``False``) takes (``{"weight": True, "bias": True}``);
        ``precision`` declares reduced-precision GEMM operands (``{"matmul": "tf32"}``);
        ``vary_attrs`` names attrs drawn from their schema values case by case (``["causal"]``:
        without it every attr keeps its default or its ``attrs`` value). The
        first ``diagnose_limit`` failures the daemon judged are diagnosed here, by re-running
        ``run_op`` on the engine's probes, and stored with that diagnosis.

        ``backward=True`` (torch, the default framework then): ``run_op`` must be differentiable (torch ops, or a
        ``torch.autograd.Function`` wrapping the kernels under test). After the forward run, the
        op's backward op (``<op>_backward``) is fuzzed with the same settings: each of its cases
        gives the forward inputs and a ``grad_out`` drawn for gradients (sparse, one-hot, wide
        magnitudes under the adversarial strategy), ``run_op`` runs with the inputs requiring grad,
        autograd runs the backward, and every input gradient is judged by the backward op's fp64
        reference; ``results.gradients`` holds that run (its failures name the gradient, e.g.
        ``output 'grad_x'``) and ``results.ok`` covers both. Ops whose backward takes a saved
        output of the forward are judged from the forward's inputs: softmax's and log_softmax's
        backward op with the logits ``x`` (``y`` is then the forward of ``x``), flash_attention's
        without the saved ``out`` and ``lse``; the error model adds what the kernel's own forward
        output may deviate by (docs/error-model.md). An op whose backward op has no such mode is
        refused with the reason: fuzz its backward kernel directly."""
        if backward:
            return self._fuzz_with_gradients(
                op, run_op, iterations=iterations, value_distribution=value_distribution, dtypes=dtypes,
                seed=seed, framework=framework, device=device, dims=dims, attrs=attrs, layouts=layouts,
                fail_fast=fail_fast, progress=progress, check_determinism=check_determinism,
                diagnose_limit=diagnose_limit, present=present, precision=precision, vary_attrs=vary_attrs)
        fw = self._framework(framework)
        options = self._options(dtypes, value_distribution, dims, attrs, layouts, present, precision, vary_attrs)
        kernel = _kernel_identity(run_op)
        kernel["framework"] = fw  # what the kernel was handed (an editor's repro script needs it)
        t0 = time.perf_counter()
        failures: List[ClientFailure] = []
        master = seed
        if iterations <= 0:
            return FuzzResults(op=op, seed=int(master if master is not None else 0),
                               value_distribution=value_distribution, framework=fw, total=0, passed=0,
                               elapsed=time.perf_counter() - t0, first_failure=-1, failures=[],
                               worst_ratio=None, worst_index=-1)
        # The run's books (counts, first failure, worst case, fail-fast, which failures this
        # process diagnoses) are the daemon's: one FuzzRun in the engine, whose summary every
        # reply carries. This loop only runs the kernel and renders that summary.
        summary: Dict[str, Any] = {}
        sent = 0  # cases handed out so far
        n = min(_CHUNK, iterations)
        batch, master = self._batch(op, options, master, 0, n, fw, device, check_determinism,
                                    prefetch=min(_CHUNK, iterations - n), digests=False,
                                    run={"iterations": int(iterations), "fail_fast": bool(fail_fast),
                                         "diagnose_limit": max(0, int(diagnose_limit))})
        run_id = self._run_id
        sent = n
        while batch is not None:
            items, tensors = [], []
            for i, (case, inputs) in enumerate(batch):
                def rebuild(case=case):
                    return {name: _fw.make_input(fw, d, shape, strides, offset, storage.copy(), device)
                            for name, (d, shape, strides, offset, storage) in case["_wire"].items()}

                item, t = self._run_item(op, run_op, case, inputs, i, check_determinism, rebuild)
                items.append(item)
                tensors.extend(t)
            for item in items:
                item["case"] = {k: v for k, v in item["case"].items() if k != "_wire"}
            params = {"op": op, "options": options, "items": items, "kernel": kernel, "store": True,
                      "client": {"name": "gpuemu-python"}, "snapshots": True, "run_id": run_id}
            left = iterations - sent
            if left > 0:  # the next chunk comes back with this one's verdicts: one request a chunk
                # ... and the daemon makes the one after it while this process runs the kernel
                nxt = min(_CHUNK, left)
                params["next"] = {"count": nxt, "start_index": sent, "seed": master,
                                  "prefetch": min(_CHUNK, left - nxt), "digests": False}
            if diagnose_limit > 0:
                params["hold_for_diagnosis"] = True  # failures come back unstored, to be diagnosed
                params["hold_by_id"] = True  # ... and kept by the daemon: only diagnoses go back
            res, tens = self.request("submit_outputs", params, tensors)
            if res.get("held"):
                diagnoses = []
                for i, ((case, _inputs), r) in enumerate(zip(batch, res["results"])):
                    if not r.get("diagnose"):  # the run's diagnosis budget names these
                        continue
                    d = self._diagnose_here(op, options, case, tensors, i, run_op, fw, device, r.get("envelope"))
                    if d is not None:
                        items[i]["diagnosis"] = d
                        diagnoses.append({"item": i, "diagnosis": d})
                del params["hold_for_diagnosis"], params["hold_by_id"]
                res, tens = self._finish_held(params, res.get("held_id"), diagnoses, tensors)
            summary = res.get("run") or summary
            done, batch = batch, (self._cases_of(res["next"], tens, fw, device, check_determinism)
                                  if "next" in res else None)
            if batch is not None:
                sent += len(batch)
            for i, ((case, inputs), item, r) in enumerate(zip(done, items, res["results"])):
                if r["passed"]:
                    continue
                snap = tens.get(f"snapshots/{i}")  # the stored snapshot's bytes (`snapshots`)
                if snap is not None:
                    r = {**r, "snapshot": base64.b64encode(snap[4].tobytes()).decode("ascii")}
                failures.append(self._failure(case, item, r, kernel))
            if progress is not None:
                progress(int(summary.get("total", 0)), iterations)
            if summary.get("done"):
                break
        worst = summary.get("worst", {})
        ratio = worst.get("ratio")
        return FuzzResults(op=op, seed=int(master if master is not None else 0),
                           value_distribution=value_distribution, framework=fw,
                           total=int(summary.get("total", 0)), passed=int(summary.get("passed", 0)),
                           elapsed=time.perf_counter() - t0, first_failure=int(summary.get("first_failure", -1)),
                           failures=failures,
                           worst_ratio=(float("inf") if ratio == "inf" else float(ratio))
                           if int(worst.get("index", -1)) >= 0 else None,
                           worst_index=int(worst.get("index", -1)))

    def _fuzz_with_gradients(self, op: str, run_op: Callable[[Dict[str, Any]], Any], **kw: Any) -> FuzzResults:
        """``fuzz_op_client_side(..., backward=True)``: the forward run, then ``<op>_backward``'s
        cases through ``run_op``'s autograd (:func:`_autograd_kernel`)."""
        kw["framework"] = kw.get("framework") or "torch"  # autograd's: the default for backward=True
        if self._framework(kw["framework"]) != "torch":
            raise errors.ValidationError("backward=True runs the kernel's autograd: it needs framework='torch'")
        bop = f"{op}_backward"
        if bop not in _core.ops():
            raise errors.ValidationError(f"backward=True: op '{op}' has no backward op in the catalogue "
                                         f"(no '{bop}'); ops with one: " +
                                         ", ".join(sorted(o[:-len('_backward')] for o in _core.ops()
                                                          if o.endswith("_backward"))))
        fschema = _core.op_schema(op)
        fwd_inputs = [i["name"] for i in fschema.get("inputs", [])]
        bschema = _core.op_schema(bop)
        # What the backward op takes beyond the forward's inputs: saved statistics (rms_norm's rstd,
        # layer_norm's mean and rstd), which the kernel's own forward recomputes from x and whose
        # recomputation the backward op's error model covers, are left to it. A saved output is the
        # kernel's own forward's under autograd, so the backward op must have a mode that judges
        # from the forward's inputs (its autograd mode, docs/python.md): an optional forward input
        # present only when pinned (softmax_backward's x: the saved y is then derived from it and
        # the reference is the exact forward of it) or saved outputs the case may drop
        # (flash_attention_backward's out and lse, presence "unless_pinned_absent"); the mode's pins
        # go to the backward run. Otherwise the op is refused.
        mode_pins: Dict[str, bool] = {}
        for i in bschema.get("inputs", []):
            if i.get("optional", False) and i.get("presence") == "when_pinned" and i["name"] in fwd_inputs:
                mode_pins[i["name"]] = True
        from_inputs = bool(mode_pins)  # the saved outputs it keeps are derived from pinned inputs
        saved = []
        for i in bschema.get("inputs", []):
            if i["name"] == "grad_out" or i["name"] in fwd_inputs or i.get("domain") in _RECOMPUTED_STATISTICS:
                continue
            if i.get("optional", False) and i.get("presence") == "unless_pinned_absent":
                mode_pins[i["name"]] = False  # the kernel's forward makes its own
            elif not from_inputs:
                saved.append(i["name"])
        if saved:
            raise errors.ValidationError(
                f"backward=True: {bop} takes the forward's saved {', '.join(saved)} beside its inputs, which "
                f"autograd keeps inside the kernel; fuzz the backward kernel itself with "
                f"fuzz_op_client_side('{bop}', ...)")
        b_inputs = [i["name"] for i in bschema.get("inputs", [])]
        optional_fwd = {i["name"] for i in fschema.get("inputs", []) if i.get("optional", False)}
        absent = [i["name"] for i in _core.op_schema(op).get("inputs", [])
                  if i["name"] not in b_inputs and not i.get("optional", False)]
        if absent:
            raise errors.ValidationError(
                f"backward=True: {bop}'s cases do not carry {op}'s {', '.join(absent)} (its gradients do not "
                f"depend on them), so the forward cannot run on them; fuzz the backward kernel itself with "
                f"fuzz_op_client_side('{bop}', ...)")
        grads = []
        zero_leaves = {}  # optional forward inputs the cases lack whose gradient is judged: their spec
        for out in bschema.get("outputs", []):
            name = out["name"]
            wrt = name[len("grad_"):] if name.startswith("grad_") else ""
            if wrt not in fwd_inputs:
                raise errors.ValidationError(f"backward=True: {bop}'s output '{name}' is not the gradient of "
                                             f"an input of {op}")
            if wrt not in b_inputs:
                if wrt not in optional_fwd:
                    raise errors.ValidationError(
                        f"backward=True: {bop} judges the gradient of {op}'s '{wrt}', which its cases do not "
                        f"carry; fuzz the backward kernel itself with fuzz_op_client_side('{bop}', ...)")
                # An optional input (a bias) whose gradient does not depend on its value: a leaf of
                # zeros stands for it, which leaves the forward's output as it is.
                zero_leaves[wrt] = next(i for i in fschema["inputs"] if i["name"] == wrt)
            grads.append((name, wrt, _present_with(bschema, out)))
        present = dict(kw.get("present") or {})
        pinned_off = [name for name in zero_leaves if present.get(name) is False]
        if pinned_off:
            raise errors.ValidationError(
                f"backward=True: {bop} judges the gradient of {op}'s '{pinned_off[0]}', which present= pins "
                f"absent; fuzz the backward kernel itself with fuzz_op_client_side('{bop}', ...)")
        forward = self.fuzz_op_client_side(op, run_op, **kw)
        if kw.get("fail_fast") and not forward.ok:
            return forward
        kernel = _autograd_kernel(run_op, fwd_inputs, grads, b_inputs, zero_leaves, fschema)
        # pins of inputs the backward op's cases carry (a forward-only input's, the bias's, are not its)
        # ... and the autograd mode's own pins (softmax_backward's x present, flash_attention_backward's
        # saved out and lse absent)
        bkw = {**kw, "present": {**{k: v for k, v in present.items() if k in b_inputs}, **mode_pins} or None}
        forward.gradients = self.fuzz_op_client_side(bop, kernel, **bkw)
        return forward

    def _finish_held(self, params: Dict[str, Any], held_id: Optional[str], diagnoses: List[Dict[str, Any]],
                     tensors: Sequence[tuple]):
        """Stores a held submission with the diagnoses made here: by its ``held_id`` (the daemon
        kept what it judged; nothing is sent again) or, when the daemon no longer holds it (it
        restarted, or keeps none), by submitting the items again with their diagnoses."""
        if held_id:
            try:
                return self.request("submit_outputs", {**{k: v for k, v in params.items() if k != "items"},
                                                        "held_id": held_id, "diagnoses": diagnoses})
            except errors.NotFoundError:
                pass
        return self.request("submit_outputs", params, tensors)

    def _local_engine(self) -> Any:
        if "_engine" not in self.__dict__:
            self._engine = _core.Engine()
        return self._engine

    def _diagnose_here(self, op: str, options: Dict[str, Any], case: Dict[str, Any], tensors: Sequence[tuple],
                       i: int, run_op: Callable, fw: str, device: Optional[str],
                       envelope: Optional[float]) -> Optional[Dict[str, Any]]:
        """The diagnosis of a failing case, by the in-process engine re-running ``run_op`` on its
        probes (contiguous copies, dims at and past block boundaries, scaled values, ...), as the
        daemon does for kernels it can run itself. None when this process cannot regenerate the
        case (an op only the daemon knows) or judges it passing."""
        kw = {"dtypes": options.get("dtypes"), "strategy": options["distribution"], "dims": options.get("dims"),
              "attrs": options.get("attrs"), "layouts": bool(options.get("layouts", True)),
              "present": options.get("present"), "precision": options.get("precision")}
        try:
            engine = self._local_engine()
            c = engine.cases(op, int(case["master_seed"]), 1, start=int(case["index"]), **kw)[0]
        except errors.GpuemuError:
            return None
        if int(c.seed) != int(case["seed"]):
            return None  # this process's catalogue generates another case: not the daemon's
        prefix = f"items/{i}/outputs/"
        outs = sorted(((int(t[0][len(prefix):]), t[5], t[1]) for t in tensors if t[0].startswith(prefix)))
        if envelope:
            engine.set_envelope(op, c.dtype, float(envelope))  # judge as the daemon did

        def want(cc: Any) -> List[Optional[str]]:
            return [e[0] for e in self._expected(op, {"dtype": cc.dtype, "dims": dict(cc.dims)}, {})]

        kernel = _Kernel(run_op, fw, device, numpy_bits=False, round_bits=_round_bits, want=want)
        res = engine.diagnose(c, [(arr, d) for _, arr, d in outs], kernel, **kw)
        if kernel.abort is not None:
            raise kernel.abort
        if res["passed"] or "diagnosis" not in res:
            return None
        d = dict(res["diagnosis"])
        d["evidence"] = list(d.get("evidence", [])) + ["probes re-ran the kernel in the client (gpuemu-python)"]
        return d

    def _failure(self, case, item, r, kernel) -> ClientFailure:
        fid = r.get("failure_id") or f"{case['op']}:{case['master_seed']}:{case['index']}"
        snapshot = r.get("snapshot", "")  # from submit_outputs' `snapshots` tensors
        if r.get("failure_id") and not snapshot:
            meta, _ = self.request("failures", {"action": "get", "id": r["failure_id"], "snapshot": True})
            snapshot = meta.get("snapshot", "")
        ins = case.get("inputs", {})
        max_error = r.get("max_error")
        return ClientFailure(
            id=fid, seed=int(case["seed"]), index=int(case["index"]), dtype=case["dtype"],
            dims=dict(case.get("dims", {})), shapes={k: list(v["shape"]) for k, v in ins.items()},
            attrs=dict(case.get("attrs", {})), layout={k: v.get("layout", "contiguous") for k, v in ins.items()},
            max_error=float("inf") if max_error is None else float(max_error),
            envelope=float(r.get("envelope") or 0.0), message=r.get("message", ""),
            diagnosis=r.get("diagnosis", {}), repro=r.get("repro") or f"gpuemu repro {fid}",
            traceback=item.get("kernel_error"), verdict={k: v for k, v in r.items() if k != "snapshot"}, snapshot=snapshot, file=kernel.get("file"),
            line=kernel.get("line"))

    # --- script-based: ops registered in gpuemu.toml --------------------------------------------
    def run_registered(self, op: str, kernel: Optional[str] = None,
                       config: Optional[Union[str, os.PathLike]] = None, iterations: Optional[int] = None,
                       seed: Optional[int] = None, dtypes: Optional[Sequence[str]] = None,
                       fail_fast: bool = False, minimize: bool = False, diagnose_limit: int = 3,
                       store: bool = True) -> FuzzResults:
        """Fuzzes an op registered in ``gpuemu.toml`` (``config``, else the first one from the
        current directory up), its script or built-in kernel run by the daemon, as ``gpuemu ci``
        does. ``kernel`` picks one of several ``[[op]]`` entries of the same op (its label
        ``"softmax.py:softmax"``, its function or built-in name). ``iterations``, ``seed`` and
        ``dtypes`` override the file's. The daemon diagnoses failures itself (it can re-run the
        script); ``minimize`` shrinks the first failure (``results.failures[0].minimized``)."""
        from ._project import load_project, select_entry

        path, entries = load_project(config)
        entry = select_entry(path, entries, op, kernel)
        options = dict(entry.options)
        if dtypes is not None:
            options["dtypes"] = [dtypes] if isinstance(dtypes, str) else list(dtypes)
        n = int(iterations if iterations is not None else entry.iterations)
        master = seed if seed is not None else entry.seed
        params: Dict[str, Any] = {"op": op, "kernel": entry.kernel, "options": options, "iterations": n,
                                  "fail_fast": bool(fail_fast), "minimize": bool(minimize),
                                  "diagnose_limit": int(diagnose_limit), "store": bool(store),
                                  "repro_prefix": entry.repro_prefix(options.get("dtypes")),
                                  "client": {"name": "gpuemu-python", "config": str(path)}}
        if master is not None:
            params["seed"] = int(master)
        t0 = time.perf_counter()
        rep, _ = self.request("fuzz", params)
        failures = [self._report_failure(f, entry.kernel) for f in rep.get("failures", [])]
        if failures and rep.get("minimized"):
            failures[0].minimized = rep["minimized"]
        return FuzzResults(op=op, seed=int(rep.get("seed", master or 0)),
                           value_distribution=options.get("distribution", "adversarial"),
                           framework=entry.kernel.get("framework", "builtin"), total=int(rep.get("total", 0)),
                           passed=int(rep.get("passed", 0)), elapsed=time.perf_counter() - t0,
                           first_failure=int(rep.get("first_failure", -1)), failures=failures)

    def _report_failure(self, f: Dict[str, Any], kernel: Dict[str, Any]) -> ClientFailure:
        """A failure of a daemon-run fuzz report as a ClientFailure."""
        fid = f.get("id") or f"{f.get('op')}:{f.get('master_seed')}:{f.get('index')}"
        snapshot = ""
        if f.get("id"):
            snapshot = self.request("failures", {"action": "get", "id": f["id"], "snapshot": True})[0].get(
                "snapshot", "")
        max_error = f.get("max_error")
        return ClientFailure(
            id=fid, seed=int(f["seed"]), index=int(f["index"]), dtype=f["dtype"], dims=dict(f.get("dims", {})),
            shapes={k: list(v) for k, v in f.get("shapes", {}).items()}, attrs=dict(f.get("attrs", {})),
            layout=dict(f.get("layouts", {})), max_error=float("inf") if max_error is None else float(max_error),
            envelope=float(f.get("envelope") or 0.0), message=f.get("message", ""),
            diagnosis=f.get("diagnosis", {}), repro=f.get("repro") or f.get("replay", ""),
            traceback=f.get("kernel_error"), verdict=f.get("verdict", {}), snapshot=snapshot,
            file=kernel.get("file"), line=kernel.get("line"))

    # --- daemon-orchestrated ------------------------------------------------------------------
    def get_test_batch(self, op: str, count: int = 10, seed: Optional[int] = None,
                       dtypes: Optional[Sequence[str]] = None, framework: Optional[str] = None,
                       device: Optional[str] = None, dims: Optional[Dict[str, Any]] = None,
                       attrs: Optional[Dict[str, Any]] = None, layouts: bool = True,
                       value_distribution: str = "adversarial", start_index: int = 0,
                       present: Optional[Dict[str, bool]] = None,
                       precision: Optional[Dict[str, str]] = None,
                       vary_attrs: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
        """``count`` cases as dicts {seed, index, dtype, inputs, attrs, dims, layout}; hand the
        kernel's output for one back with :meth:`submit_output`. ``inputs`` holds every input of
        the op by name, ``None`` for an optional one the case leaves out; ``present`` and
        ``precision`` as in :meth:`fuzz_op_client_side`."""
        fw = self._framework(framework)
        options = self._options(dtypes, value_distribution, dims, attrs, layouts, present, precision, vary_attrs)
        out = []
        done = 0
        master = seed
        while done < count:
            n = min(1024, count - done)
            batch, master = self._batch(op, options, master, start_index + done, n, fw, device)
            for case, inputs in batch:
                self._cases[(op, int(case["seed"]))] = (case, options, inputs)
                out.append({"seed": int(case["seed"]), "index": int(case["index"]), "dtype": case["dtype"],
                            "inputs": self._with_absent(op, case, {k: v.tensor for k, v in inputs.items()}),
                            "attrs": dict(case.get("attrs", {})), "dims": dict(case.get("dims", {})),
                            "layout": {k: v.get("layout") for k, v in case["inputs"].items()},
                            "master_seed": master, "_case": case})
            done += n
        return out

    def submit_output(self, op: str, inputs: Optional[Dict[str, Any]], output: Any, seed: int,
                      run_op: Optional[Callable] = None) -> Verdict:
        """The daemon's verdict on ``output`` for the case of :meth:`get_test_batch` with ``seed``.
        The inputs the case handed out are sent back too, so a kernel that wrote into them fails
        with "input mutated" (an input the kernel got as a copy — on a device, or as decoded
        bfloat16/fp8 values — goes back only when the copy no longer matches what was received)."""
        key = (op, int(seed))
        if key not in self._cases:
            raise errors.NotFoundError(f"no case with seed {seed} of {op!r} was fetched by this client "
                                       "(call get_test_batch first)")
        case, options, held = self._cases[key]
        item, tensors = self._run_item(op, lambda _args: output, case, held, 0, False, None, runs_here=False)
        res, _ = self.request("submit_outputs", {"op": op, "options": options, "items": [item],
                                                 "kernel": _kernel_identity(run_op) if run_op else
                                                 {"kind": "client", "name": "submit_output"},
                                                 "store": True, "client": {"name": "gpuemu-python"}}, tensors)
        return self._verdict(res["results"][0])

    @staticmethod
    def _verdict(r: Dict[str, Any]) -> Verdict:
        return Verdict(passed=bool(r["passed"]), max_error=r.get("max_error"), envelope=r.get("envelope"),
                       message=r.get("message", ""), seed=int(r.get("seed", 0)), index=int(r.get("index", 0)),
                       diagnosis=r.get("diagnosis", {}), failure_id=r.get("failure_id"), repro=r.get("repro"))

    # --- stored failures and the rest ---------------------------------------------------------
    def failures(self, op: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {"action": "list"}
        if op:
            params["op"] = op
        if limit:
            params["limit"] = int(limit)
        res = self.request("failures", params)[0]
        if res.get("truncated"):
            warnings.warn(f"listed the newest {res.get('count')} of {res.get('matching')} stored failures (a reply "
                          "holds at most 12 MiB): pass op= or limit=", RuntimeWarning, stacklevel=2)
        return res.get("failures", [])

    def failure(self, failure_id: str, snapshot: bool = False) -> Dict[str, Any]:
        return self.request("failures", {"action": "get", "id": failure_id, "snapshot": snapshot})[0]

    def reproduce(self, failure_id: str, run_op: Optional[Callable] = None,
                  framework: Optional[str] = None, device: Optional[str] = None) -> Dict[str, Any]:
        """Replays a stored failure. The daemon regenerates the case from its seed and compares it
        with the stored bytes (``regenerated_identical``); a daemon-side kernel is rerun there. A
        client-side kernel is rerun here when ``run_op`` is given: ``verdict`` is then its
        judgement on the stored inputs."""
        res, tens = self.request("reproduce", {"id": failure_id})
        if run_op is not None:
            fw = self._framework(framework)
            case = res["case"]
            inputs = {}
            for name in case["inputs"]:
                d, shape, strides, offset, storage = tens[f"inputs/{name}"]
                inputs[name] = _fw.make_input(fw, d, shape, strides, offset, storage, device)
            options = self.failure(failure_id).get("options", {})
            item, t = self._run_item(case["op"], run_op, case, inputs, 0, False, None)
            sub, _ = self.request("submit_outputs", {"op": case["op"], "options": options, "items": [item],
                                                     "kernel": _kernel_identity(run_op), "store": False}, t)
            v = sub["results"][0]
            res["verdict"] = v
            res["passed"] = v["passed"]
            res["message"] = v.get("message", "")
            res["max_error"] = v.get("max_error")
        return res

    def minimize(self, failure_id: str, run_op: Optional[Callable] = None, max_evaluations: int = 200,
                 framework: Optional[str] = None, device: Optional[str] = None) -> Dict[str, Any]:
        """Shrinks a stored failure to the smallest failing case (``summary``, ``dims``,
        ``transforms``, ``evaluations``, the minimized ``case``). A failure of a kernel the daemon
        runs (built-in or script) is minimized there, and the result stored (``minimized_id``). A
        client-side kernel's failure needs ``run_op``: the case is regenerated here from its seed
        and the in-process engine re-runs ``run_op`` on smaller variants of it."""
        if run_op is None:
            return self.request("minimize", {"id": failure_id, "max_evaluations": int(max_evaluations)})[0]
        fw = self._framework(framework)
        meta = self.failure(failure_id)
        op = meta["op"]
        o = meta.get("options", {})
        kw = {"dtypes": o.get("dtypes") or None, "strategy": o.get("distribution", "adversarial"),
              "dims": o.get("dims") or None, "attrs": o.get("attrs") or None,
              "vary_attrs": o.get("vary_attrs") or None, "layouts": bool(o.get("layouts", True)),
              "present": o.get("present") or None, "precision": o.get("precision") or None}
        engine = self._local_engine()
        case = engine.case_from_seed(op, int(meta["seed"]), **kw)
        if meta.get("envelope"):
            engine.set_envelope(op, case.dtype, float(meta["envelope"]))

        def want(cc: Any) -> List[Optional[str]]:
            return [e[0] for e in self._expected(op, {"dtype": cc.dtype, "dims": dict(cc.dims)}, {})]

        kernel = _Kernel(run_op, fw, device, numpy_bits=False, round_bits=_round_bits, want=want)
        res = engine.minimize(case, kernel, dims=kw["dims"], layouts=kw["layouts"],
                              max_evaluations=int(max_evaluations), present=kw["present"],
                              precision=kw["precision"])
        if kernel.abort is not None:
            raise kernel.abort
        res["id"] = failure_id
        return res

    def calibrate(self, op: str, dtypes: Optional[Sequence[str]] = None, cases: int = 200,
                  seed: Optional[int] = None, apply: bool = True) -> Dict[str, Any]:
        params: Dict[str, Any] = {"op": op, "cases": int(cases), "apply": apply}
        if dtypes is not None:
            params["dtypes"] = [dtypes] if isinstance(dtypes, str) else list(dtypes)
        if seed is not None:
            params["seed"] = int(seed)
        return self.request("calibrate", params)[0]

    def lint(self, paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
             arch: Optional[Union[str, Sequence[str]]] = None) -> Dict[str, Any]:
        ps = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        params: Dict[str, Any] = {"paths": [os.path.abspath(str(p)) for p in ps]}
        if arch is not None:
            params["arches"] = [arch] if isinstance(arch, str) else list(arch)
        return self.request("lint", params)[0]


# Domains of a backward op's saved inputs that are statistics of the forward's inputs (values.cpp,
# derive_saved), which a kernel's forward recomputes and the backward op's model covers.
_RECOMPUTED_STATISTICS = ("saved_rstd", "saved_mean", "saved_ln_rstd")


def _output_present(schema: Dict[str, Any], out: Dict[str, Any], inputs: Any) -> bool:
    """Whether output spec ``out`` of ``schema``'s op is returned for a case holding ``inputs``:
    an output shaped like an optional input exists exactly when that input does."""
    cond = _present_with(schema, out)
    return cond is None or (cond in inputs and inputs[cond] is not None)


def _present_with(schema: Dict[str, Any], out: Dict[str, Any]) -> Optional[str]:
    """The optional input whose presence ``out`` follows (its shape ``like:`` it), or None."""
    spec = out.get("shape")
    if not (isinstance(spec, str) and spec.startswith("like:")):
        return None
    src = next((i for i in schema.get("inputs", []) if i["name"] == spec[5:]), None)
    return spec[5:] if src is not None and src.get("optional", False) else None


def _zero_leaf(spec: Dict[str, Any], fschema: Dict[str, Any], args: Dict[str, Any]) -> Any:
    """Zeros shaped as the forward's input ``spec``, its dims read off the forward inputs at hand
    (their shapes against their schema shapes, from the last dim), in their dtype and device."""
    import torch

    dims: Dict[str, int] = {}
    like = None
    for s in fschema.get("inputs", []):
        t = args.get(s["name"])
        if not (torch.is_tensor(t) and isinstance(s.get("shape"), list)):
            continue
        like = like if like is not None or not t.is_floating_point() else t
        for name, size in zip(reversed(s["shape"]), reversed(list(t.shape))):
            if isinstance(name, str):
                dims.setdefault(name, int(size))
    shape = [d if isinstance(d, int) else dims[d] for d in spec["shape"]]
    return torch.zeros(shape, dtype=like.dtype, device=like.device, requires_grad=True)


def _autograd_kernel(run_op: Callable[[Dict[str, Any]], Any], fwd_inputs: Sequence[str],
                     grads: Sequence[Tuple[str, str, Optional[str]]], b_inputs: Sequence[str] = (),
                     zero_leaves: Optional[Dict[str, Dict[str, Any]]] = None,
                     fschema: Optional[Dict[str, Any]] = None) -> Callable[[Dict[str, Any]], Any]:
    """A kernel of ``<op>_backward`` made of ``run_op``'s autograd: the forward inputs (as received,
    with their strides) become leaves that require grad, ``run_op`` runs on them and the attrs (not
    on the saved statistics the backward op also takes: the kernel's forward computes its own),
    ``torch.autograd.backward`` takes the case's ``grad_out``, and the leaves' gradients come back
    in the backward op's output order (``grads``: output name, input name, and the optional input
    whose presence the output follows). An optional forward input the cases lack whose gradient is
    judged (``zero_leaves``) is a leaf of zeros. A gradient autograd never reached is returned as
    zeros, and judged."""
    zero_leaves = zero_leaves or {}

    def run(inputs: Dict[str, Any]) -> Any:
        import torch

        leaves: Dict[str, Any] = {}
        args: Dict[str, Any] = {}
        for name, value in inputs.items():
            if name == "grad_out" or (name in b_inputs and name not in fwd_inputs):
                continue  # the upstream gradient, and saved statistics
            if name in fwd_inputs and torch.is_tensor(value) and value.is_floating_point():
                value = value.detach().requires_grad_(True)
                leaves[name] = value
            args[name] = value
        wanted = [(o, i) for o, i, cond in grads if cond is None or inputs.get(cond) is not None]
        for _o, name in wanted:
            if name in zero_leaves and name not in leaves:
                leaves[name] = args[name] = _zero_leaf(zero_leaves[name], fschema or {}, args)
        for name in fwd_inputs:
            args.setdefault(name, None)  # an optional input the case lacks, as PyTorch's weight=None
        out = run_op(args)
        first = out[0] if isinstance(out, (tuple, list)) else out
        torch.autograd.backward(first, inputs["grad_out"])
        result = []
        for _out_name, in_name in wanted:
            leaf = leaves[in_name]
            result.append(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf))
        return tuple(result) if len(result) > 1 else result[0]

    run.__wrapped__ = run_op  # type: ignore[attr-defined]  # the kernel's identity (file, line) is run_op's
    return run
