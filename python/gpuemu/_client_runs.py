"""Client-side fuzz runs (the Client's concern that runs kernels): ``fuzz_op_client_side``'s loop (one
request a chunk; the run's books are the daemon's FuzzRun), the diagnoses made here by re-running the
kernel on the engine's probes, the failures rendered from the daemon's summary, ``run_registered``
(gpuemu.toml's ops, run by the daemon) and the daemon-orchestrated ``get_test_batch`` /
``submit_output``. gpuemu.client.Client mixes it in."""

from __future__ import annotations

import base64
import functools
import inspect
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _core, errors
from . import _frameworks as _fw
from ._client_cases import _round_bits
from ._client_state import _HandedOutCase
from .inprocess import _FIRST_CHUNK, Failure, FuzzResults, _Kernel, _varied, _varyable_attrs

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


@dataclass
class _ClientRun:
    """One client-side fuzz run (``fuzz_op_client_side``), from its first batch to its results:
    what it was asked for, the daemon run it opened (``run_id``: every submission names it), and
    what it has seen so far. Made by the call and passed along, never kept on the Client, so two
    runs on one Client (two threads) share nothing but the connection. Its books (counts, first
    failure, worst case, fail-fast, the diagnosis budget) are the daemon's: ``summary`` is the
    latest the daemon sent."""

    op: str
    run_op: Callable[[Dict[str, Any]], Any]
    framework: str
    device: Optional[str]
    iterations: int
    value_distribution: str
    options: Dict[str, Any]  # the options the run was asked for
    kernel: Dict[str, Any]  # the kernel's identity, sent with every submission
    seed: Optional[int]  # the master seed: the caller's, then the daemon's once the first batch came
    fail_fast: bool
    diagnose_limit: int
    check_determinism: bool
    torch_op: bool  # a gpuemu.torch_op: its reference is computed here and sent with each item
    part_of: Optional[Dict[str, Any]] = None  # the backward=True run this one is a part of
    # The attrs drawn when the kernel reads them (vary_attrs=None): ``reads`` gathers the attrs
    # run_op read (None: attrs are not drawn that way); ``auto``/``always``: _varyable_attrs's.
    auto: Sequence[str] = ()
    always: Sequence[str] = ()
    reads: Optional[set] = None
    run_id: Optional[str] = None
    sent: int = 0  # cases handed out so far
    chunk_options: Dict[str, Any] = field(default_factory=dict)  # the options of the chunk at hand
    varied: set = field(default_factory=set)
    summary: Dict[str, Any] = field(default_factory=dict)
    failures: List[ClientFailure] = field(default_factory=list)
    t0: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.chunk_options = self.options
        self.varied = set(_varied(self.options.get("vary_attrs"), self.auto, self.always))

    def opened(self, first: Any, count: int) -> None:
        """The daemon opened the run: its id and master seed came with the first ``count`` cases."""
        self.run_id = first.run_id
        self.seed = first.master_seed
        self.sent = count

    def submission(self, items: List[Dict[str, Any]]) -> Dict[str, Any]:
        """The submit_outputs params of a chunk's items, under the options it was drawn with, with
        the request for the next chunk while cases are left."""
        params: Dict[str, Any] = {"op": self.op, "options": self.chunk_options, "items": items, "kernel": self.kernel,
                                  "store": True, "client": {"name": "gpuemu-python"}, "snapshots": True,
                                  "run_id": self.run_id}
        if self.part_of:  # a part of a backward=True run (_client_gradients)
            params["part_of"] = self.part_of
        left = self.iterations - self.sent
        if left > 0:  # the next chunk comes back with this one's verdicts: one request a chunk
            # ... and the daemon makes the one after it while this process runs the kernel
            nxt = min(_CHUNK, left)
            params["next"] = {"count": nxt, "start_index": self.sent, "seed": self.seed,
                              "prefetch": min(_CHUNK, left - nxt), "digests": False}
            if self.reads is not None:
                vary = sorted(set(self.chunk_options.get("vary_attrs", ())) | (self.reads & set(self.auto)))
                if vary != self.chunk_options.get("vary_attrs", []):
                    params["next"]["options"] = {**self.options, "vary_attrs": vary}
        return params

    def handed_out(self, count: int, options: Dict[str, Any]) -> None:
        """The next chunk came: ``count`` cases drawn under ``options``."""
        self.sent += count
        self.chunk_options = options
        self.varied |= set(_varied(options.get("vary_attrs"), self.auto, self.always))

    def results(self) -> FuzzResults:
        """The run's results, rendered from the daemon's summary and the failures seen here."""
        seed = int(self.seed if self.seed is not None else 0)
        if self.iterations <= 0:  # no case was asked for
            return FuzzResults(op=self.op, seed=seed, value_distribution=self.value_distribution,
                               framework=self.framework, total=0, passed=0, elapsed=time.perf_counter() - self.t0,
                               first_failure=-1, failures=[], worst_ratio=None, worst_index=-1)
        summary = self.summary
        worst = summary.get("worst", {})
        ratio = worst.get("ratio")
        return FuzzResults(op=self.op, seed=seed, value_distribution=self.value_distribution,
                           framework=self.framework, total=int(summary.get("total", 0)),
                           passed=int(summary.get("passed", 0)), elapsed=time.perf_counter() - self.t0,
                           first_failure=int(summary.get("first_failure", -1)), failures=self.failures,
                           worst_ratio=(float("inf") if ratio == "inf" else float(ratio))
                           if int(worst.get("index", -1)) >= 0 else None,
                           worst_index=int(worst.get("index", -1)), varied_attrs=sorted(self.varied),
                           inconclusive=int(summary.get("inconclusive", 0)))


class _Runs:
    """Client-side runs and single-case submissions (a mixin of Client)."""

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
        attrs: an attr ``run_op`` reads from its inputs (``inputs["causal"]``; ``**inputs`` and
        ``items()`` read every one) is drawn from its schema values in the chunks of cases after
        the one it was read in (the first chunk is the first case alone, with every attr at its
        default), unless ``attrs`` pins it; an attr it never reads keeps its default.
        ``vary_attrs`` names the attrs drawn instead (``["causal"]``, from the first case on;
        ``[]``: none); ``results.varied_attrs`` lists those that were. The
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
        refused with the reason: fuzz its backward kernel directly.

        Each call is a run of its own: several may go on at once on one Client, from several
        threads (docs/python.md, "Runs and threads")."""
        if not isinstance(op, str):  # gpuemu.torch_op: its reference runs here, the daemon judges
            op = self._register_torch_op(op)
            if backward:
                raise errors.ValidationError(f"op '{op}' is made from PyTorch code: backward=True needs a backward "
                                             "op of the catalogue")
        kw = dict(iterations=iterations, value_distribution=value_distribution, dtypes=dtypes, seed=seed,
                  framework=framework, device=device, dims=dims, attrs=attrs, layouts=layouts, fail_fast=fail_fast,
                  progress=progress, check_determinism=check_determinism, diagnose_limit=diagnose_limit,
                  present=present, precision=precision, vary_attrs=vary_attrs)
        if backward:
            return self._fuzz_with_gradients(op, run_op, **kw)
        return self._fuzz_client_side(op, run_op, **kw)

    def _fuzz_client_side(self, op: str, run_op: Callable[[Dict[str, Any]], Any], iterations: int,
                          value_distribution: str, dtypes: Optional[Sequence[str]], seed: Optional[int],
                          framework: Optional[str], device: Optional[str], dims: Optional[Dict[str, Any]],
                          attrs: Optional[Dict[str, Any]], layouts: bool, fail_fast: bool,
                          progress: Optional[Callable[[int, int], None]], check_determinism: bool,
                          diagnose_limit: int, present: Optional[Dict[str, bool]],
                          precision: Optional[Dict[str, str]], vary_attrs: Optional[Sequence[str]],
                          part_of: Optional[Dict[str, Any]] = None) -> FuzzResults:
        """One client-side run of ``op`` (a name; a torch op registered already): the
        :class:`_ClientRun` made here holds all its state, so runs on one Client, from several
        threads, do not share any. ``part_of``: the backward=True run this one is a part of."""
        fw = self._framework(framework)
        options = self._options(dtypes, value_distribution, dims, attrs, layouts, present, precision, vary_attrs)
        kernel = _kernel_identity(run_op)
        kernel["framework"] = fw  # what the kernel was handed (an editor's repro script needs it)
        # Attrs drawn when the kernel reads them (vary_attrs=None): `reads` gathers the attrs run_op
        # read; the chunk after the one they were read in is drawn under vary_attrs=those (the
        # daemon's `next.options`), and each chunk is submitted under the options it was drawn with.
        auto, always = _varyable_attrs(self._schema(op), attrs)
        run = _ClientRun(op=op, run_op=run_op, framework=fw, device=device, iterations=int(iterations),
                         value_distribution=value_distribution, options=options, kernel=kernel, seed=seed,
                         fail_fast=bool(fail_fast), diagnose_limit=max(0, int(diagnose_limit)),
                         check_determinism=check_determinism, torch_op=self._catalogue.torch_op(op) is not None,
                         part_of=part_of, auto=auto, always=always,
                         reads=set() if vary_attrs is None and auto else None)
        if iterations <= 0:
            return run.results()
        # The run's books (counts, first failure, worst case, fail-fast, which failures this
        # process diagnoses) are the daemon's: one FuzzRun in the engine, whose summary every
        # reply carries. This loop only runs the kernel and renders that summary.
        n = min(_FIRST_CHUNK if run.reads is not None else _CHUNK, run.iterations)
        first = self._fetch_batch(op, options, seed, 0, n, fw, device, check_determinism,
                                  prefetch=min(_CHUNK, run.iterations - n), digests=False,
                                  run={"iterations": run.iterations, "fail_fast": run.fail_fast,
                                       "diagnose_limit": run.diagnose_limit})
        run.opened(first, n)
        batch: Optional[list] = first.cases
        while batch is not None:
            batch = self._run_chunk(run, batch)
            if progress is not None:
                progress(int(run.summary.get("total", 0)), run.iterations)
            if run.summary.get("done"):
                break
        return run.results()

    def _run_chunk(self, run: "_ClientRun", batch: list) -> Optional[list]:
        """Runs the kernel on one chunk of ``run``'s cases, submits the outputs (with the request
        for the next chunk), diagnoses here the failures the daemon marks; the next chunk, or None."""
        op, fw, device = run.op, run.framework, run.device
        items, tensors = [], []
        for i, (case, inputs) in enumerate(batch):
            def rebuild(case=case):
                return {name: _fw.make_input(fw, d, shape, strides, offset, storage.copy(), device)
                        for name, (d, shape, strides, offset, storage) in case["_wire"].items()}

            supplied = self._supplied_reference(op, case, inputs, i) if run.torch_op else []
            item, t = self._run_item(op, run.run_op, case, inputs, i, run.check_determinism, rebuild,
                                     reads=run.reads)
            items.append(item)
            tensors.extend(t)
            tensors.extend(supplied)
        for item in items:
            item["case"] = {k: v for k, v in item["case"].items() if k != "_wire"}
        params = run.submission(items)
        params.update(self._torch_op_params(op))
        if run.diagnose_limit > 0:
            params["hold_for_diagnosis"] = True  # failures come back unstored, to be diagnosed
            params["hold_by_id"] = True  # ... and kept by the daemon: only diagnoses go back
        res, tens = self.request("submit_outputs", params, tensors)
        if res.get("held"):
            diagnoses = []
            for i, ((case, _inputs), r) in enumerate(zip(batch, res["results"])):
                if not r.get("diagnose"):  # the run's diagnosis budget names these
                    continue
                d = self._diagnose_here(op, run.chunk_options, case, tensors, i, run.run_op, fw, device,
                                        r.get("envelope"))
                if d is not None:
                    items[i]["diagnosis"] = d
                    diagnoses.append({"item": i, "diagnosis": d})
            del params["hold_for_diagnosis"], params["hold_by_id"]
            res, tens = self._finish_held(params, res.get("held_id"), diagnoses, tensors)
        run.summary = res.get("run") or run.summary
        nxt = (self._cases_of(res["next"], tens, fw, device, run.check_determinism) if "next" in res else None)
        if nxt is not None:
            run.handed_out(len(nxt), params["next"].get("options", run.chunk_options))
        for i, ((case, inputs), item, r) in enumerate(zip(batch, items, res["results"])):
            if r["passed"]:
                continue
            snap = tens.get(f"snapshots/{i}")  # the stored snapshot's bytes (`snapshots`)
            if snap is not None:
                r = {**r, "snapshot": base64.b64encode(snap[4].tobytes()).decode("ascii")}
            run.failures.append(self._failure(case, item, r, run.kernel))
        return nxt

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

    def _local_engine(self, op: Optional[str] = None) -> Any:
        """The in-process engine (with the torch op ``op`` in its catalogue, when it is one); use it
        under ``self._catalogue.engine_lock``."""
        return self._catalogue.engine(op)

    def _diagnose_here(self, op: str, options: Dict[str, Any], case: Dict[str, Any], tensors: Sequence[tuple],
                       i: int, run_op: Callable, fw: str, device: Optional[str],
                       envelope: Optional[float]) -> Optional[Dict[str, Any]]:
        """The diagnosis of a failing case, by the in-process engine re-running ``run_op`` on its
        probes (contiguous copies, dims at and past block boundaries, scaled values, ...), as the
        daemon does for kernels it can run itself. None when this process cannot regenerate the
        case (an op only the daemon knows) or judges it passing."""
        kw = {"dtypes": options.get("dtypes"), "strategy": options["distribution"], "dims": options.get("dims"),
              "attrs": options.get("attrs"), "vary_attrs": options.get("vary_attrs") or None,
              "layouts": bool(options.get("layouts", True)),
              "present": options.get("present"), "precision": options.get("precision")}
        prefix = f"items/{i}/outputs/"
        outs = sorted(((int(t[0][len(prefix):]), t[5], t[1]) for t in tensors if t[0].startswith(prefix)))

        def want(cc: Any) -> List[Optional[str]]:
            return [e[0] for e in self._expected(op, {"dtype": cc.dtype, "dims": dict(cc.dims)}, {})]

        kernel = _Kernel(run_op, fw, device, numpy_bits=False, round_bits=_round_bits, want=want)
        # The engine is the Client's, its envelope set for this diagnosis: another run's diagnosis
        # waits (the probes re-run this run's kernel meanwhile).
        with self._catalogue.engine_lock:
            try:
                engine = self._local_engine(op)
                c = engine.cases(op, int(case["master_seed"]), 1, start=int(case["index"]), **kw)[0]
            except errors.GpuemuError:
                return None
            if int(c.seed) != int(case["seed"]):
                return None  # this process's catalogue generates another case: not the daemon's
            if envelope:
                engine.set_envelope(op, c.dtype, float(envelope))  # judge as the daemon did
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
            line=kernel.get("line"), tensors=list(r.get("failed_outputs") or []))

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
        # The CLI's reader (python/src/project.cpp); torch ops are read by this package's runner.
        cfg = _core.load_project_config("" if config is None else os.fspath(config),
                                        os.path.join(os.path.dirname(__file__), "_script_runner.py"))
        entry = _select_entry(cfg, op, kernel)
        spec = entry.kernel_spec()
        options = entry.fuzz_options()
        if dtypes is not None:
            options["dtypes"] = [dtypes] if isinstance(dtypes, str) else list(dtypes)
        n = int(iterations if iterations is not None else entry.iterations)
        master = seed if seed is not None else entry.seed
        params: Dict[str, Any] = {"op": op, "kernel": spec, "options": options, "iterations": n,
                                  "fail_fast": bool(fail_fast), "minimize": bool(minimize),
                                  "diagnose_limit": int(diagnose_limit), "store": bool(store),
                                  "repro_prefix": entry.repro_prefix(options.get("dtypes") or []),
                                  "client": {"name": "gpuemu-python", "config": cfg.file}}
        if master is not None:
            params["seed"] = int(master)
        custom = cfg.custom_op(op)  # a [custom_ops.NAME] of the file, sent as `gpuemu ci` sends it
        if custom is not None:
            params["custom_op"] = custom.spec()
        if entry.envelope:
            params["envelope"] = dict(entry.envelope)
        t0 = time.perf_counter()
        rep, _ = self.request("fuzz", params)
        failures = [self._report_failure(f, spec) for f in rep.get("failures", [])]
        if failures and rep.get("minimized"):
            failures[0].minimized = rep["minimized"]
        return FuzzResults(op=op, seed=int(rep.get("seed", master or 0)),
                           value_distribution=options.get("distribution", "adversarial"),
                           framework=spec.get("framework", "builtin"), total=int(rep.get("total", 0)),
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
            fetched = self._fetch_batch(op, options, master, start_index + done, n, fw, device)
            batch, master = fetched.cases, fetched.master_seed
            for case, inputs in batch:
                handed = self._with_absent(op, case, {k: v.tensor for k, v in inputs.items()})
                self._cases.add(op, _HandedOutCase(case, options, inputs, handed))
                out.append({"seed": int(case["seed"]), "index": int(case["index"]), "dtype": case["dtype"],
                            "inputs": handed,
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
        bfloat16/fp8 values — goes back only when the copy no longer matches what was received).
        The output is judged against the case its batch handed out: when batches of ``op`` drawn
        from one seed under other options handed out several cases with this case seed,
        ``inputs`` (the case's ``inputs``, or a dict of its tensors) says which."""
        case, options, held = self._cases.find(op, int(seed), inputs).as_tuple()
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


def _select_entry(cfg: Any, op: str, kernel: Optional[str]) -> Any:
    """The [[op]] entry of ``op`` in ``cfg`` (a ``_core.ProjectConfig``), and of ``kernel``: its
    label, function or built-in name."""
    mine = [e for e in cfg.ops if e.op == op]
    if not mine:
        known = sorted({e.op for e in cfg.ops})
        raise errors.NotFoundError(f"{cfg.file}: no [[op]] registers '{op}' "
                                   f"(registered: {', '.join(known) or 'none'})")
    if kernel is not None:
        mine = [e for e in mine if kernel in (e.label, e.function or None, e.builtin or None)]
        if not mine:
            raise errors.NotFoundError(f"{cfg.file}: no [[op]] '{op}' with kernel '{kernel}'")
    if len(mine) > 1:
        labels = ", ".join(e.label for e in mine)
        raise errors.ValidationError(f"{cfg.file}: '{op}' is registered {len(mine)} times ({labels}): "
                                     "pick one with kernel=")
    return mine[0]
