"""Fuzz a kernel in this process: the engine generates cases, your ``run_op`` computes them.

::

    import torch, gpuemu

    def run_op(inputs):                      # every input by schema name, every attr by name
        return my_softmax(inputs["x"], dim=inputs["dim"])

    results = gpuemu.fuzz_op_in_process("softmax", run_op)   # adversarial, 100 cases
    assert results.ok, results.summary()

The engine (``gpuemu._core.Engine``) draws each case from the op's schema, computes the fp64
reference from the exact low-precision values it generated, and judges ``run_op``'s output with
the op's error model against the calibrated envelope of (op, dtype) (``schemas/envelopes.json``,
or ``$GPUEMU_ENVELOPES``). Failing cases are diagnosed (the likely bug class with its evidence)
and, with ``minimize=True``, shrunk to the smallest failing shape.

How inputs reach ``run_op``:

- ``framework="torch"``: a ``torch.Tensor`` per input with the case's real layout — the same
  sizes, strides and storage offset over a storage holding the case's exact bytes (a fresh copy
  per call, so a kernel that writes its inputs cannot change the case). Transposed, stepped,
  offset and expanded (stride 0) views stay exactly that. ``bfloat16`` arrives as
  ``torch.bfloat16``; fp8 as ``torch.float8_*`` where the installed torch has it, else as exact
  float32 values.
- ``framework="cupy" | "jax" | "tensorflow"``: as the daemon client hands them out
  (docs/python.md, "Frameworks and dtypes").
- ``framework="numpy"``: the numpy views the engine hands out (same strides and offset;
  ``bfloat16`` as ``uint16`` bits, fp8 as ``uint8`` bits).
- An optional input the case leaves out (e.g. layer_norm without ``bias``) arrives as ``None``.

What ``run_op`` may return: one tensor/array, or a tuple/list of them (one per schema output).
Torch tensors carry their dtype. Numpy arrays are taken by their numpy dtype, except that a
``uint16`` (``uint8``) array in a ``bfloat16`` (fp8) case is read as that dtype's bits; an explicit
``(array, "bfloat16")`` pair is accepted too. An exception raised by ``run_op`` (or an output that
cannot be converted) is a failing case whose ``traceback`` holds the Python traceback.
"""

from __future__ import annotations

import secrets
import sys
import time
import traceback as _traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _frameworks as _fw
from ._native import core
from .errors import ValidationError

__all__ = ["Failure", "FuzzResults", "case_inputs", "fuzz_op_in_process", "replay"]

Frameworks = _fw.FRAMEWORKS
Strategies = ("regular", "boundary", "adversarial", "special")


@dataclass
class Failure:
    """One failing case.

    ``id`` is ``"<op>:<master seed>:<case index>"``; ``seed`` the case seed (which alone
    regenerates the case's bytes, see :func:`replay`); ``shapes`` and ``layout`` map each input to
    its shape and layout kind (contiguous, transposed, strided, offset, expanded); ``max_error``
    is the worst normalised error (``inf`` when the kernel raised or returned non-finite values
    where the reference is finite) against ``envelope``; ``diagnosis`` is the engine's
    ``{"bug_class", "summary", "evidence"}``; ``repro`` a Python call that replays the case;
    ``traceback`` the traceback when ``run_op`` raised; ``minimized`` the minimizer's result
    (``{"summary", "dims", "transforms", "evaluations", ...}``) when asked for. ``tensors`` names
    the tensors of the case that failed, by schema name: the op's outputs (``["out"]``) and, in a
    ``backward=True`` run, the gradients (``["grad_x"]``, ``["out", "grad_x"]``); empty where the
    judge did not say (an in-process run's failure).
    """

    id: str
    seed: int
    index: int
    dtype: str
    dims: Dict[str, int]
    shapes: Dict[str, List[int]]
    attrs: Dict[str, Any]
    layout: Dict[str, str]
    max_error: float
    envelope: float
    message: str
    diagnosis: Dict[str, Any]
    repro: str
    traceback: Optional[str] = None
    minimized: Optional[Dict[str, Any]] = None
    verdict: Dict[str, Any] = field(default_factory=dict, repr=False)
    tensors: List[str] = field(default_factory=list)

    @property
    def bug_class(self) -> str:
        return str(self.diagnosis.get("bug_class", "")) if self.diagnosis else ""

    def describe(self) -> str:
        """A few lines for a human: what failed, where, the likely cause, how to replay it."""
        layout = ", ".join(f"{k}={v}" for k, v in self.layout.items() if v != "contiguous")
        lines = [
            f"{self.id} [{self.dtype}] dims {self.dims}"
            + (f" attrs {self.attrs}" if self.attrs else "")
            + (f" layout {layout}" if layout else ""),
            f"  {self.message}",
        ]
        if self.tensors:
            lines.insert(1, f"  failed: {', '.join(self.tensors)}")
        if self.diagnosis and self.diagnosis.get("summary"):
            lines.append(f"  diagnosis: {self.diagnosis.get('bug_class')}: {self.diagnosis['summary']}")
        if self.minimized and self.minimized.get("summary"):
            lines.append(f"  minimized: {self.minimized['summary']}")
        if self.traceback:
            lines.append("  " + self.traceback.rstrip().replace("\n", "\n  "))
        lines.append(f"  replay: {self.repro}")
        return "\n".join(lines)


@dataclass
class FuzzResults:
    """The outcome of :func:`fuzz_op_in_process`. ``ok`` (and ``bool(results)``) when every case
    passed. ``first_failure`` is the index of the first failing case (-1: none), so
    ``first_failure + 1`` cases were needed to find the bug. ``worst_ratio`` is the largest
    ``max_error / envelope`` over every case judged, passing or not (below 1 passes; ``inf`` for
    a kernel error or a non-finite mismatch), at case ``worst_index``: the margin a passing kernel
    kept (None when the daemon did not report it)."""

    op: str
    seed: int
    value_distribution: str
    framework: str
    total: int
    passed: int
    elapsed: float
    first_failure: int
    failures: List[Failure]
    worst_ratio: Optional[float] = None
    worst_index: int = -1
    # With ``backward=True`` (Client.fuzz_op_client_side): the run of the op's backward op, whose
    # cases fed the kernel's autograd a fuzzed ``grad_out`` and judged every input gradient. The
    # results themselves then count a case failed when its output or any gradient failed (case i
    # is the forward's case i and the gradients' case i, at the same case seed); ``forward`` is
    # the forward run alone.
    gradients: Optional["FuzzResults"] = None
    forward: Optional["FuzzResults"] = field(default=None, repr=False)
    # The attrs drawn over their schema values in some cases of the run (the rest kept their
    # default or their pinned value): those the kernel was seen to read, or ``vary_attrs``.
    varied_attrs: List[str] = field(default_factory=list)
    # Cases that passed where they could be judged, with elements the reference cannot resolve (an
    # op from PyTorch code: docs/torch-ops.md): neither passed nor failed. They do not fail ``ok``.
    inconclusive: int = 0

    @property
    def failed(self) -> int:
        return self.total - self.passed - self.inconclusive

    @property
    def ok(self) -> bool:
        """No case failed (inconclusive ones do not count), the gradients' too when they were judged."""
        return self.failed == 0 and (self.gradients is None or self.gradients.ok)

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        head = (
            f"{self.op}: {self.passed}/{self.total} passed"
            + (f", {self.inconclusive} inconclusive" if self.inconclusive else "")
            + f" ({self.value_distribution}, seed {self.seed}, {self.elapsed:.2f}s)"
        )
        if self.varied_attrs:
            head += f"; attrs varied: {', '.join(self.varied_attrs)}"
        if self.forward is not None and self.gradients is not None:
            head += (f"; a case is its output and its gradients: forward {self.forward.passed}/"
                     f"{self.forward.total}, gradients {self.gradients.passed}/{self.gradients.total} passed")
        lines = [head] + [f.describe() for f in self.failures[:5]]
        if self.gradients is not None:  # its head: its failures are among the case's, above
            lines.append("gradients: " + self.gradients.summary().split("\n")[0])
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------------------------
# Inputs: engine case -> framework tensors


_INPUT_NAMES: Dict[str, Tuple[str, ...]] = {}


def _input_names(op: str) -> Tuple[str, ...]:
    if op not in _INPUT_NAMES:
        _INPUT_NAMES[op] = tuple(i["name"] for i in core().op_schema(op).get("inputs", []))
    return _INPUT_NAMES[op]


def case_inputs(case: Any, framework: str = "torch", device: Optional[str] = None,
                numpy_bits: bool = True) -> Dict[str, Any]:
    """The inputs of an engine ``TestCase`` as framework tensors with the case's exact layout, and
    every resolved attr, by name: what ``run_op`` receives. Each call gets a fresh copy of the
    case's storage. ``numpy_bits``: numpy gets bfloat16/fp8 as their bits (``False``: as exact
    float32 values, as the daemon client hands them out)."""
    if framework not in _fw.FRAMEWORKS:
        raise ValidationError(f"unknown framework '{framework}' ({', '.join(_fw.FRAMEWORKS)})")
    if framework == "numpy" and numpy_bits:
        args: Dict[str, Any] = {name: arr for name, (arr, _dt) in case.inputs().items()}
    else:
        args = {
            name: _fw.make_input(framework, dt, shape, strides, offset, np.frombuffer(bytearray(storage), np.uint8),
                                 device).tensor
            for name, (dt, shape, strides, offset, storage) in case.snapshot().items()
        }
    for name in _input_names(case.op):  # an optional input the case left out arrives as None
        args.setdefault(name, None)
    for name, value in case.attrs.items():
        if name in args:
            raise ValidationError(f"op '{case.op}': attr '{name}' has the name of an input")
        args[name] = value
    return args


# ---------------------------------------------------------------------------------------------
# Outputs: what run_op returned -> [(numpy array, gpuemu dtype name)]


def _outputs(result: Any, case_dtype: str, round_bits: Optional[_fw.RoundBits] = None,
             want: Optional[Sequence[Optional[str]]] = None) -> List[Tuple[np.ndarray, str]]:
    """[(array, dtype)] of what run_op returned (one output or a tuple/list of them). A
    ``uint16``/``uint8`` array in a bfloat16/fp8 case is read as the dtype's bits; float values
    there are rounded by ``round_bits``, or judged as float32 when it is None."""
    if isinstance(result, (list, tuple)) and not (
        len(result) == 2 and isinstance(result, tuple) and isinstance(result[1], str)
    ):
        values = list(result)
    else:
        values = [result]
    out = []
    for k, v in enumerate(values):
        w = want[k] if want is not None and k < len(want) else case_dtype
        name, arr = _fw.output_array(v, w, round_bits)
        out.append((arr, name))
    return out


# ---------------------------------------------------------------------------------------------
# Attrs drawn when the kernel reads them


class _ReadTracking(dict):
    """``run_op``'s inputs: a plain dict to the kernel, which records the attrs (``watched``) the
    kernel read into ``reads``: ``inputs["dim"]``, ``.get``, ``.pop``, ``.setdefault``; ``items()``,
    ``values()``, ``keys()``, iteration, ``copy()``, ``dict(inputs)`` and ``**inputs`` read every
    attr. ``"dim" in inputs`` and ``len`` read none."""

    def __init__(self, data: Dict[str, Any], watched: Iterable[str], reads: set) -> None:
        super().__init__(data)
        self._watched = frozenset(watched)
        self._reads = reads

    def _read(self, key: Any) -> None:
        if key in self._watched:
            self._reads.add(key)

    def _read_all(self) -> None:
        self._reads.update(self._watched)

    def __getitem__(self, key: Any) -> Any:
        self._read(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._read(key)
        return super().get(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        self._read(key)
        return super().pop(key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._read(key)
        return super().setdefault(key, default)

    def popitem(self) -> Any:
        self._read_all()
        return super().popitem()

    def items(self):  # type: ignore[override]
        self._read_all()
        return super().items()

    def values(self):  # type: ignore[override]
        self._read_all()
        return super().values()

    def keys(self):  # type: ignore[override]  # ** unpacking and dict(inputs) go through keys()
        self._read_all()
        return super().keys()

    def __iter__(self):
        self._read_all()
        return super().__iter__()

    def copy(self) -> Dict[str, Any]:  # type: ignore[override]
        self._read_all()
        return dict(super().items())

    def __or__(self, other: Any) -> Any:
        self._read_all()
        return dict(super().items()) | other

    def __ror__(self, other: Any) -> Any:
        self._read_all()
        return other | dict(super().items())

    def __reduce__(self) -> Any:
        self._read_all()
        return (dict, (dict(super().items()),))


def _attr_specs(schema: Mapping[str, Any]) -> List[Tuple[str, Mapping[str, Any]]]:
    attrs = schema.get("attrs") or {}
    if isinstance(attrs, Mapping):
        return list(attrs.items())
    return [(a["name"], a) for a in attrs]


def _varyable_attrs(schema: Mapping[str, Any], pinned: Optional[Mapping[str, Any]]) -> Tuple[List[str], List[str]]:
    """(the attrs a kernel's read makes varied: semantic ones with schema values, not pinned;
    the attrs the generator draws in every run: non-semantic ones with values, not pinned)."""
    pinned = pinned or {}
    auto, always = [], []
    for name, spec in _attr_specs(schema):
        if name in pinned or not spec.get("values"):
            continue
        (auto if spec.get("semantic", True) else always).append(name)
    return sorted(auto), sorted(always)


def _varied(vary: Optional[Sequence[str]], auto: Sequence[str], always: Sequence[str]) -> List[str]:
    """The attrs a generator under ``vary_attrs=vary`` draws over their values."""
    return sorted((set(vary or ()) & set(auto)) | set(always))


# Cases [0, 1) of a run that draws the attrs its kernel reads are drawn before any read is seen,
# with every attr at its default; the reads seen in one chunk vary the attrs of the next (the
# client-side run's chunks: _client_runs._CHUNK).
_FIRST_CHUNK = 1
_READ_CHUNK = 16


# ---------------------------------------------------------------------------------------------
# The kernel adapter handed to the engine


class _Kernel:
    """Wraps run_op as the engine's kernel: case -> [(array, dtype)]. Records the traceback of
    the first exception per case seed; lets KeyboardInterrupt/SystemExit end the run."""

    def __init__(self, run_op: Callable[[Dict[str, Any]], Any], framework: str, device: Optional[str] = None,
                 numpy_bits: bool = True, round_bits: Optional[_fw.RoundBits] = None,
                 want: Optional[Callable[[Any], Sequence[Optional[str]]]] = None) -> None:
        self.run_op = run_op
        self.framework = framework
        self.device = device
        self.numpy_bits = numpy_bits
        self.round_bits = round_bits
        self.want = want  # case -> the dtype expected of each output (None: the case's dtype)
        self.tracebacks: Dict[int, str] = {}
        self.abort: Optional[BaseException] = None
        self.reads: Optional[set] = None  # a set: the attrs run_op reads are recorded there

    def __call__(self, case: Any) -> List[Tuple[np.ndarray, str]]:
        if self.abort is not None:
            raise RuntimeError("run aborted")
        try:
            args = case_inputs(case, self.framework, self.device, self.numpy_bits)
            if self.reads is not None:
                args = _ReadTracking(args, case.attrs.keys(), self.reads)
            return _outputs(self.run_op(args), case.dtype, self.round_bits,
                            self.want(case) if self.want is not None else None)
        except Exception as exc:
            self.tracebacks.setdefault(case.seed, _traceback.format_exc())
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: stop, re-raised after the run
            self.abort = exc
            raise RuntimeError("run aborted") from None


def _engine() -> Any:
    return core().Engine()


def _resolve(op: Any) -> Tuple[Any, str, Dict[str, Any]]:
    """(engine, op name, schema) of an op name, or of an op object (gpuemu.torch_op's): the engine
    then holds that op too."""
    if isinstance(op, str):
        return _engine(), op, core().op_schema(op)
    engine_of = getattr(op, "engine", None)
    if not callable(engine_of) or not isinstance(getattr(op, "schema", None), dict):
        raise ValidationError(f"op must be an op name or a gpuemu.torch_op, got {type(op).__name__}")
    return engine_of(_engine()), op.name, op.schema


def _canonical_dtypes(dtypes: Optional[Iterable[Any]]) -> Optional[List[str]]:
    if dtypes is None:
        return None
    if isinstance(dtypes, str) or not isinstance(dtypes, Iterable):
        dtypes = [dtypes]
    from .dtypes import canonical

    return [canonical(d) for d in dtypes]


def _repro(op: str, case_seed: int, distribution: str, dtypes: Optional[List[str]], dims: Any, attrs: Any,
           vary_attrs: Any, layouts: bool, framework: str, present: Any = None, precision: Any = None) -> str:
    args = [repr(op), "run_op", f"case_seed={case_seed:#x}", f"value_distribution={distribution!r}"]
    for name, value in (("dtypes", dtypes), ("dims", dims), ("attrs", attrs), ("vary_attrs", vary_attrs),
                        ("present", present), ("precision", precision)):
        if value:
            args.append(f"{name}={value!r}")
    if not layouts:
        args.append("layouts=False")
    if framework != "torch":
        args.append(f"framework={framework!r}")
    return f"gpuemu.inprocess.replay({', '.join(args)})"


def _failure(op: str, report_seed: int, f: Mapping[str, Any], kernel: _Kernel, repro: str) -> Failure:
    traceback_text = kernel.tracebacks.get(int(f["seed"])) if f.get("kernel_error") else None
    max_error = f.get("max_error")
    return Failure(
        id=f"{op}:{report_seed}:{f['index']}",
        seed=int(f["seed"]),
        index=int(f["index"]),
        dtype=str(f["dtype"]),
        dims=dict(f.get("dims", {})),
        shapes={k: list(v) for k, v in f.get("shapes", {}).items()},
        attrs=dict(f.get("attrs", {})),
        layout=dict(f.get("layouts", {})),
        max_error=float("inf") if max_error is None else float(max_error),
        envelope=float(f.get("envelope", 0.0)),
        message=str(f.get("message", "")).split("\n\nAt:\n")[0].strip(),
        diagnosis=dict(f.get("diagnosis", {})),
        repro=repro,
        traceback=traceback_text,
        verdict=dict(f.get("verdict", {})),
    )


def fuzz_op_in_process(
    op: str,
    run_op: Callable[[Dict[str, Any]], Any],
    iterations: int = 100,
    value_distribution: str = "adversarial",
    dtypes: Optional[Union[str, Iterable[Any]]] = None,
    seed: Optional[int] = None,
    framework: str = "torch",
    dims: Optional[Mapping[str, Union[int, Sequence[int]]]] = None,
    attrs: Optional[Mapping[str, Any]] = None,
    layouts: bool = True,
    fail_fast: bool = False,
    minimize: Union[bool, int] = False,
    *,
    vary_attrs: Optional[Sequence[str]] = None,
    diagnose: bool = True,
    device: Optional[str] = None,
    present: Optional[Mapping[str, bool]] = None,
    precision: Optional[Mapping[str, str]] = None,
) -> FuzzResults:
    """Fuzz ``run_op`` as an implementation of ``op`` for ``iterations`` cases.

    ``value_distribution``: regular, boundary, adversarial (default) or special (NaN/Inf/-0 in
    the inputs, judged by whether the output propagates them as the reference does).
    ``dtypes``: restrict the case dtypes (names, aliases or torch/numpy dtypes); default: every
    dtype of the op. ``seed``: the master seed (random when None; reported in the results).
    ``dims``: restrict dims by name (``{"D": [64, 128]}``); ``attrs``: pin attrs.
    Attrs: by default (``vary_attrs=None``) an attr ``run_op`` reads from its inputs
    (``inputs["offset"]``, ``.get``; ``**inputs``, ``items()`` and iteration read every attr) is
    drawn from its schema values in later cases: the first case runs with every attr at its
    default, and the reads of each chunk of cases (1, then 16 at a time) vary the attrs of the
    next. An attr it never reads keeps its default; one pinned in ``attrs`` keeps that value.
    ``vary_attrs=[...]`` names the attrs drawn instead, from the first case on, reads or not;
    ``vary_attrs=[]`` varies none. ``results.varied_attrs`` lists the attrs that were drawn
    (with non-semantic ones such as group_norm's ``num_groups``, drawn in every run), and
    each failure's ``repro`` the ``vary_attrs`` its case was drawn with. ``layouts=False`` keeps every input
    contiguous. ``fail_fast``: stop at the first failure. ``minimize``: shrink failing cases
    (``True``: the first failure; an int n: the first n). ``diagnose``: name the likely bug class
    of each failure (it re-runs the kernel on a few variants of the case). ``framework``: torch,
    numpy, cupy, jax or tensorflow (gpuemu._frameworks); ``device`` where its tensors live.
    ``present``: pin optional inputs the kernel always (``True``) or never (``False``) takes,
    e.g. ``{"weight": True, "bias": True}`` for a layer norm whose signature requires both; an
    optional input not pinned is left out of one case in four and then arrives as ``None``.
    ``precision``: reduced-precision GEMM operands declared on purpose, per op or op family
    (``{"matmul": "tf32"}``; policies ieee, tf32, tf32x3, bf16x3, docs/error-model.md): the error
    model then allows that operand rounding; by default a TF32 fp32 GEMM fails.
    """
    engine, op, schema = _resolve(op)
    _fw.require(framework)  # unknown or not installed: a ValidationError naming the package
    if value_distribution not in Strategies:
        raise ValidationError(
            f"unknown value distribution '{value_distribution}' (regular, boundary, adversarial, special)"
        )
    if iterations < 0:
        raise ValidationError("iterations must be >= 0")
    if seed is None:
        seed = secrets.randbits(63)
    dtype_names = _canonical_dtypes(dtypes)
    dims_arg = {k: ([int(v)] if isinstance(v, int) else [int(x) for x in v]) for k, v in dims.items()} if dims else None
    attrs_arg = dict(attrs) if attrs else None
    if isinstance(vary_attrs, str):
        raise ValidationError(f"vary_attrs must be a list of attr names, got {vary_attrs!r}")
    vary_arg = list(vary_attrs) if vary_attrs is not None else None
    pins = {"present": dict(present) if present else None, "precision": dict(precision) if precision else None}

    kernel = _Kernel(run_op, framework, device)
    n_min = int(minimize) if not isinstance(minimize, bool) else (1 if minimize else 0)
    auto, always = _varyable_attrs(schema, attrs_arg)
    # vary_attrs=None: the attrs run_op reads are varied from the chunk after the one it read them
    # in (the first case keeps every attr at its default); a list (even empty) is the one varied.
    detect = vary_arg is None and bool(auto)
    started = time.perf_counter()
    # Runs in the engine (Engine::fuzz: generation, judging, the diagnosis budget, the first
    # failures minimized with this kernel), one a chunk while the attrs read are watched.
    phases: List[Tuple[Dict[str, Any], Optional[List[str]]]] = []
    start, diagnoses, minimized = 0, 0, 0
    vary_now = vary_arg
    while start < iterations:
        n = int(iterations) - start
        if detect:
            n = min(n, _FIRST_CHUNK if start == 0 else _READ_CHUNK)
            kernel.reads = set()
        report = engine.fuzz(
            op, kernel, int(seed), n, dtypes=dtype_names, strategy=value_distribution, dims=dims_arg,
            attrs=attrs_arg, vary_attrs=vary_now or None, layouts=layouts, fail_fast=fail_fast, diagnose=diagnose,
            minimize=max(n_min - minimized, 0), start_index=start, diagnose_limit=max(3 - diagnoses, 0), **pins,
        )
        if kernel.abort is not None:
            raise kernel.abort
        phases.append((report, vary_now))
        start += n
        if diagnose:  # the engine diagnoses the first failures of a run, up to its limit
            diagnoses += min(len(report["failures"]), max(3 - diagnoses, 0))
        minimized += sum(1 for f in report["failures"] if "minimized" in f)
        if fail_fast and report["failures"]:
            break
        if detect:
            read = sorted(set(vary_now or ()) | (kernel.reads & set(auto)))
            vary_now = read or None

    failures: List[Failure] = []
    total = passed = inconclusive = 0
    first_failure, worst_ratio, worst_index = -1, None, -1
    varied: set = set()
    for report, vary in phases:
        varied |= set(_varied(vary, auto, always))
        total += int(report["total"])
        passed += int(report["passed"])
        inconclusive += int(report.get("inconclusive", 0))
        if first_failure < 0:
            first_failure = int(report.get("first_failure", -1))
        ratio = float(report["worst"]["ratio"])
        if int(report["worst"]["index"]) >= 0 and (worst_ratio is None or ratio > worst_ratio):
            worst_ratio, worst_index = ratio, int(report["worst"]["index"])
        for f in report["failures"]:
            repro = _repro(op, int(f["seed"]), value_distribution, dtype_names, dims_arg, attrs_arg, vary, layouts,
                           framework, **pins)
            failures.append(_failure(op, int(seed), f, kernel, repro))
            if "minimized" in f:
                failures[-1].minimized = f["minimized"]

    return FuzzResults(
        op=op,
        seed=int(seed),
        value_distribution=value_distribution,
        framework=framework,
        total=total,
        passed=passed,
        elapsed=time.perf_counter() - started,
        first_failure=first_failure,
        failures=failures,
        worst_ratio=worst_ratio if worst_ratio is not None else 0.0,
        worst_index=worst_index,
        varied_attrs=sorted(varied),
        inconclusive=inconclusive,
    )


def replay(
    op: str,
    run_op: Optional[Callable[[Dict[str, Any]], Any]],
    case_seed: int,
    value_distribution: str = "adversarial",
    dtypes: Optional[Union[str, Iterable[Any]]] = None,
    dims: Optional[Mapping[str, Union[int, Sequence[int]]]] = None,
    attrs: Optional[Mapping[str, Any]] = None,
    vary_attrs: Optional[Sequence[str]] = None,
    layouts: bool = True,
    framework: str = "torch",
    present: Optional[Mapping[str, bool]] = None,
    precision: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Regenerates the case of ``case_seed`` (a failure's ``seed``; the other arguments as in the
    run that found it). With ``run_op``, runs and judges it: returns the engine's verdict
    (``passed``, ``max_error``, ``envelope``, ``message``, ...) plus ``"inputs"``; without it,
    returns ``{"inputs": ..., "case": ...}`` so the case can be debugged by hand."""
    engine = _engine()
    dims_arg = {k: ([int(v)] if isinstance(v, int) else [int(x) for x in v]) for k, v in dims.items()} if dims else None
    case = engine.case_from_seed(op, int(case_seed), dtypes=_canonical_dtypes(dtypes), strategy=value_distribution,
                                 dims=dims_arg, attrs=dict(attrs) if attrs else None,
                                 vary_attrs=list(vary_attrs) if vary_attrs else None, layouts=layouts,
                                 present=dict(present) if present else None,
                                 precision=dict(precision) if precision else None)
    inputs = case_inputs(case, framework)
    if run_op is None:
        return {"inputs": inputs, "case": case}
    verdict = engine.judge(case, _outputs(run_op(case_inputs(case, framework)), case.dtype))
    verdict["inputs"] = inputs
    return verdict
