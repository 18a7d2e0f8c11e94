"""gpuemu.torch_op: an op of gpuemu made from the PyTorch code a kernel replaces."""

from __future__ import annotations

import copy
import hashlib
import inspect
import math
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import ValidationError
from ._bounds import U32, BoundTensor, UnsupportedOpError, evaluate
from ._infer import Inferred, infer, schema_text

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ENVELOPE = 2.0  # every term is derived, none calibrated: the floor every catalogue envelope has
INDETERMINATE = 1e39  # a c_acc the verdict reads as "an fp32 intermediate may overflow here" (>= FLT_MAX / 4)


def _input_names(fn: Callable, count: int) -> List[str]:
    """The names of ``fn``'s first ``count`` positional parameters (``x0``, ``x1``, ... for
    ``*args``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    out: List[str] = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            out.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            out.extend(f"{p.name}{k}" for k in range(count - len(out)))
            break
    if len(out) < count:
        out.extend(f"x{k}" for k in range(len(out), count))
    return out[:count]


def _param_sizes(module: Optional[torch.nn.Module]) -> Dict[int, str]:
    sizes: Dict[int, str] = {}
    if module is None:
        return sizes
    for kind, items in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for n, t in items:
            for s in t.shape:
                if int(s) > 1:
                    sizes.setdefault(int(s), f"{kind} '{n}' {list(t.shape)}")
    return sizes


class TorchOp:
    """An op of gpuemu whose fp64 reference is PyTorch code (docs/torch-ops.md).

    ``schema`` is inferred from ``example_inputs`` (and the module's parameters); each case's
    reference is the same code run in float64 on the case's exact inputs, with each output's bound
    derived op by op (``c_acc``: a correct fp32 implementation's error; ``c_in``: rounding each
    op's result to the case dtype, as PyTorch does in float16/bfloat16), plus the measuring stick:
    what PyTorch itself, run in the case dtype and in float32, is off by beyond its last rounding.
    Pass it wherever an op name goes: ``gpuemu.fuzz_op_in_process(op, run_op)``,
    ``Client().fuzz_op_client_side(op, run_op)``.
    """

    def __init__(self, name: str, reference: Union[torch.nn.Module, Callable[..., Any]],
                 example_inputs: Sequence[Any], *, input_names: Optional[Sequence[str]] = None,
                 dims: Optional[Dict[str, Sequence[Any]]] = None, pin: Optional[Dict[str, int]] = None,
                 bound: Optional[Dict[str, Tuple[int, int]]] = None, index: Optional[Dict[str, Any]] = None,
                 dtypes: Optional[Sequence[str]] = None, max_elements: Optional[int] = None,
                 size_names: Optional[Dict[int, str]] = None, int_ranges: Optional[Dict[str, Tuple[int, int]]] = None,
                 stick: bool = True, fused: bool = False,
                 envelope: float = ENVELOPE, summary: str = "") -> None:
        if not callable(reference):
            raise ValidationError("reference must be an nn.Module or a function")
        if isinstance(example_inputs, (torch.Tensor, int, float)):
            example_inputs = (example_inputs,)
        self.name = name
        self.module = reference if isinstance(reference, torch.nn.Module) else None
        self.call = reference  # a module keeps its mode (KernelBench's run in the default training mode)
        self.example = tuple(example_inputs)
        fn = self.module.forward if self.module is not None else reference
        self.input_names = list(input_names) if input_names is not None else _input_names(fn, len(self.example))
        if len(self.input_names) != len(self.example) or len(set(self.input_names)) != len(self.input_names):
            raise ValidationError(f"input_names {self.input_names} do not name the {len(self.example)} example "
                                  "inputs once each")
        for dt in dtypes or ():
            if dt not in _TORCH_DTYPES:
                raise ValidationError(f"dtype {dt!r}: a torch op takes float32, float16 or bfloat16")
        self.stick = stick
        # fused: the kernel keeps every intermediate in fp32 (one fused kernel), so rounding each
        # op's result to the case dtype (c_in) is not admitted: only c_acc and the output's rounding
        self.fused = bool(fused)
        self.envelope = float(envelope)
        self.last_unresolved, self.last_shapes, self.last_digest, self.last_terms = 0, [], "", []
        self._modules: Dict[torch.dtype, Any] = {}
        self._lock = threading.Lock()
        self.inferred: Inferred = infer(name, self._plain(torch.float32), self.example, self.input_names,
                                        _param_sizes(self.module), size_names=size_names, dims=dims, pin=pin,
                                        bound=bound, index=index, dtypes=dtypes, max_elements=max_elements,
                                        int_ranges=int_ranges, summary=summary)
        consumers: Dict[str, set] = {}
        try:
            evaluate(self._plain(torch.float32), self.inferred.probe_inputs(self.input_names, self.example),
                     names=self.input_names, consumers=consumers)
        except UnsupportedOpError as exc:
            raise ValidationError(f"op '{name}': {exc}") from None
        self.inferred.set_recipes(consumers)

    # --- what the engine needs --------------------------------------------------------------------

    @property
    def schema(self) -> Dict[str, Any]:
        return self.inferred.schema

    @property
    def notes(self) -> List[str]:
        return list(self.inferred.notes)

    def schema_json(self) -> str:
        return schema_text(self.schema)

    def engine(self, base: Any) -> Any:
        """A copy of ``base`` (a gpuemu._core.Engine) with this op in its catalogue."""
        from ..inprocess import _INPUT_NAMES

        _INPUT_NAMES[self.name] = tuple(i["name"] for i in self.schema["inputs"])
        return base.with_op(self.schema_json(), f"<torch_op {self.name}>", self.reference, self.envelope)

    def _plain(self, dtype: torch.dtype) -> Callable[..., Any]:
        """The reference as PyTorch runs it in ``dtype`` (a module cast to it, once)."""
        if self.module is None:
            return self.call
        if dtype not in self._modules:
            self._modules[dtype] = copy.deepcopy(self.module).to(dtype)
        return self._modules[dtype]

    def args_from(self, inputs: Dict[str, Any], attrs: Dict[str, Any], dtype: torch.dtype) -> List[Any]:
        """The reference's positional arguments for a case: its inputs (numpy, exact) as tensors in
        the case dtype, its scalars from the attrs."""
        out = []
        for n, ex in zip(self.input_names, self.example):
            if not isinstance(ex, torch.Tensor):
                out.append(attrs.get(n, ex))
                continue
            a = inputs[n]
            t = torch.from_numpy(np.ascontiguousarray(a))
            out.append(t.to(dtype) if ex.is_floating_point() else t.to(ex.dtype))
        return out

    def reference(self, inputs: Dict[str, Any], attrs: Dict[str, Any], dims: Dict[str, int],
                  dtype: str) -> List[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """One case's fp64 reference with its bounds, per output (value, c_acc, c_in)."""
        tdt = _TORCH_DTYPES[dtype]
        args = self.args_from(inputs, attrs, tdt)
        with self._lock:
            out = evaluate(self._plain(tdt), args, case_dtype=tdt, boundaries=not self.fused)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        result = []
        for o in outs:
            if not isinstance(o, BoundTensor):
                raise ValidationError(f"op '{self.name}': the reference returned a {type(o).__name__}")
            v = o.v.detach().numpy().astype(np.float64) if o.v.is_floating_point() else o.v.numpy().astype(np.float64)
            e = o.e.numpy().copy()
            i = np.zeros_like(e) if self.fused else o.i.numpy().copy()
            result.append([v, e, i])
        zeros = [np.zeros_like(r[0]) for r in result]
        sticks, pytorch_dtype = self._stick(args, tdt, [r[0] for r in result]) if self.stick else (zeros, zeros)
        # each output's terms, apart, for a verdict to name (the last case's)
        self.last_terms = [{"fp32_arithmetic": r[1], "case_dtype_rounding": r[2], "measuring_stick": st,
                            "pytorch_in_case_dtype": pd, "dtype": dtype}
                           for r, st, pd in zip(result, sticks, pytorch_dtype)]
        for k, s in enumerate(sticks):
            result[k][1] = result[k][1] + s
        # what the last case's reference was: unresolvable elements (an infinite bound: a decision
        # the reference cannot make within its own error), each output's shape and dtype, a digest
        self.last_unresolved = int(sum(int(np.isinf(r[1]).sum()) for r in result))
        self.last_shapes = [(tuple(o.v.shape), "case" if o.v.is_floating_point() else str(o.dtype).replace("torch.", ""))
                            for o in outs]
        self.last_digest = hashlib.sha1(b"".join(r[0].tobytes() for r in result)).hexdigest()
        return [tuple(r) for r in result]

    def _stick(self, args: List[Any], tdt: torch.dtype,
               values: List[np.ndarray]) -> Tuple[List[np.ndarray], List[np.ndarray]]:
        """The measuring stick: what PyTorch, run on the same inputs, is off by beyond its own last
        rounding, per element, in units of u_fp32 (0 where it cannot run here). Returns (the float32
        run's: added to the bound, a safety net under the derived terms; the case dtype's: reported,
        not admitted). PyTorch's CPU kernels in 16 bits keep some statistics in 16 bits (1.13's
        layer_norm, bench/conformance/imprecise.py): that is an imprecision of theirs, which a kernel
        compared with them must not inherit; rounding at op boundaries, what a 16-bit composition
        legitimately costs, is c_in."""
        from ..dtypes import round_to

        added = [np.zeros_like(v) for v in values]
        reported = [np.zeros_like(v) for v in values]
        for run_dt in (torch.float32, tdt):
            try:
                with torch.no_grad(), self._lock:
                    r = self._plain(run_dt)(*[a.to(run_dt) if isinstance(a, torch.Tensor) and a.is_floating_point()
                                              else a for a in args])
            except Exception:  # not implemented in this dtype on this machine: no measurement
                continue
            rs = list(r) if isinstance(r, (tuple, list)) else [r]
            name = str(run_dt).replace("torch.", "")
            for k, (x, v) in enumerate(zip(rs, values)):
                if not isinstance(x, torch.Tensor) or not x.is_floating_point() or tuple(x.shape) != v.shape:
                    continue
                got = x.detach().to(torch.float64).numpy()
                with np.errstate(invalid="ignore"):
                    d = np.abs(got - round_to(v, name))
                d = np.where(np.isfinite(d), d, 0.0) / U32
                if run_dt == torch.float32:
                    # Where PyTorch's own fp32 run overflows (Inf or NaN where the value is finite), a
                    # correct kernel may too: the element is indeterminate (the verdict's reading of a
                    # c_acc past a quarter of fp32's range), as the catalogue's overflow guard makes it.
                    overflowed = ~np.isfinite(got) & np.isfinite(v)
                    added[k] = np.maximum(added[k], np.where(overflowed, INDETERMINATE, d))
                else:
                    reported[k] = np.maximum(reported[k], d)
            if tdt == torch.float32:
                break
        return added, reported

    @staticmethod
    def terms_at(terms: List[Dict[str, Any]], output: int, index: int, ref: float) -> Dict[str, float]:
        """The bound's terms at one element of one output (absolute values): what a verdict names."""
        t = terms[output]
        u_in = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[t["dtype"]]
        flat = lambda a: float(np.asarray(a).reshape(-1)[index])  # noqa: E731
        return {"output_rounding": u_in * abs(ref), "fp32_arithmetic": U32 * flat(t["fp32_arithmetic"]),
                "case_dtype_rounding": u_in * flat(t["case_dtype_rounding"]),
                "measuring_stick": U32 * flat(t["measuring_stick"]),
                # what PyTorch itself is off by in the case dtype there: reported, not part of the bound
                "pytorch_in_case_dtype": U32 * flat(t["pytorch_in_case_dtype"])}

    def __repr__(self) -> str:
        return f"TorchOp({self.name!r}, dims={ {d: s.get('values', [s.get('min'), s.get('max')]) for d, s in self.schema['dims'].items()} })"


def torch_op(name: str, reference: Union[torch.nn.Module, Callable[..., Any]], example_inputs: Sequence[Any],
             **options: Any) -> TorchOp:
    """An op of gpuemu from the PyTorch code a kernel replaces (docs/torch-ops.md):

        op = gpuemu.torch_op("add_rms_norm", reference=AddRmsNorm(4096), example_inputs=(x, residual))
        gpuemu.fuzz_op_in_process(op, my_add_rms_norm)
        Client().fuzz_op_client_side(op, my_add_rms_norm)

    Options: ``dims`` ({input: [dim name or 1, ...]}: name each input's dims yourself), ``pin``
    ({dim: size}), ``bound`` ({dim: (min, max)}), ``index`` ({input: dim or n}: an integer input's
    values lie in [0, n)), ``dtypes``, ``max_elements`` (the per-case budget), ``input_names``,
    ``stick`` (the measuring stick, default on), ``fused`` (default off: the kernel may round each
    op's result to the case dtype, as PyTorch's unfused code does in 16 bits; on: it keeps every
    intermediate in fp32, as one fused kernel does, and only its output is rounded), ``envelope``
    (default 2)."""
    return TorchOp(name, reference, example_inputs, **options)
