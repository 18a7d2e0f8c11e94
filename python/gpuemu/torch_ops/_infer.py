"""The schema of an op inferred from the PyTorch code it replaces and one call of it.

Every size of the example inputs becomes a dim: equal sizes one dim (unless ``dims`` names each
input's dims), a size of 1 stays 1 (a broadcast), a size a parameter or buffer of the module has is
fixed (the module was built for it). The other dims are free, and probed: the reference is run at
small sizes (distinct primes, then 1) in float32; a dim at which it raises is fixed at its example
size, and the reason is kept (``notes``), said once. Each input's adversarial value recipe comes from
the ops that read it (softmax's input is drawn as logits, layer_norm's as a norm's rows, a GEMM's
or a sum's as accumulated terms, the rest as elementwise operands).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..errors import ValidationError

_PRIMES = (7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROBE_ELEMENTS = 1 << 26  # a probe larger than this is not run (the dim is kept at its example size)

_LOGITS = {"aten._softmax", "aten._log_softmax", "aten.logsumexp", "aten.softmax", "aten.log_softmax",
           "aten.nll_loss_forward", "aten.cross_entropy_loss", "aten.amax", "aten.argmax", "aten.max"}
_NORM = {"aten.native_layer_norm", "aten.native_group_norm", "aten.native_batch_norm", "aten.var", "aten.rsqrt",
         "aten.var_mean", "aten.std", "aten.std_mean", "aten.instance_norm", "aten.layer_norm",
         "aten.group_norm", "aten.batch_norm", "aten.linalg_vector_norm", "aten.norm"}
_ACCUMULATED = {"aten.mm", "aten.bmm", "aten.addmm", "aten.matmul", "aten.convolution", "aten.linear",
                "aten.sum", "aten.mean", "aten.cumsum", "aten.baddbmm", "aten.einsum", "aten.mv", "aten.dot",
                "aten.addmv", "aten.avg_pool2d", "aten.avg_pool1d", "aten.avg_pool3d", "aten._adaptive_avg_pool2d",
                "aten.conv2d", "aten.conv1d", "aten.conv3d", "aten.tensordot"}


@dataclass
class Inferred:
    """What inference made: the schema (a dict in the catalogue's format), each input's dims by
    axis (a dim name or the literal 1), each scalar argument (an attr), the notes said once."""

    schema: Dict[str, Any]
    axes: Dict[str, List[Any]]
    scalars: Dict[str, Any]
    notes: List[str] = field(default_factory=list)
    probe_sizes: Dict[str, int] = field(default_factory=dict)  # the small sizes the reference ran at
    domains: Dict[str, Tuple[int, int]] = field(default_factory=dict)  # integer inputs' [lo, hi]

    def probe_inputs(self, names: Sequence[str], example: Sequence[Any]) -> List[Any]:
        return make_inputs(names, example, self.axes, self.probe_sizes, self.domains)

    def set_recipes(self, consumers: Dict[str, set]) -> None:
        """Each floating input's value recipe, from the user-level ops that read it."""
        for spec in self.schema["inputs"]:
            if "values" in spec:
                spec["values"] = _recipe(consumers.get(spec["name"], set()))


def _tensor_spec(t: torch.Tensor) -> Tuple[str, bool]:
    if t.is_floating_point():
        return "case", True
    if t.dtype == torch.bool:
        return "bool", False
    return str(t.dtype).replace("torch.", ""), False


def make_inputs(names: Sequence[str], example: Sequence[Any], axes: Dict[str, List[Any]], sizes: Dict[str, int],
                 domains: Dict[str, Tuple[int, int]], dtype: torch.dtype = torch.float32) -> List[Any]:
    """Random inputs of the given dim sizes (float ones as N(0,1) in ``dtype``, integer ones
    within their domain): what a probe runs the reference on."""
    g = torch.Generator().manual_seed(1234)
    out = []
    for name, ex in zip(names, example):
        if not isinstance(ex, torch.Tensor):
            out.append(ex)
            continue
        shape = [sizes[a] if isinstance(a, str) else int(a) for a in axes[name]]
        if ex.is_floating_point():
            out.append(torch.randn(shape, generator=g).to(dtype))
        elif ex.dtype == torch.bool:
            out.append(torch.rand(shape, generator=g) < 0.5)
        else:
            lo, hi = domains[name]
            out.append(torch.randint(lo, hi + 1, shape, generator=g).to(ex.dtype))
    return out


def _spreads(call: Callable, names: Sequence[str], example: Sequence[Any], axes: Dict[str, List[Any]],
             sizes: Dict[str, int], domains: Dict[str, Tuple[int, int]], outs: Sequence[torch.Tensor]
             ) -> Dict[str, Optional[float]]:
    """How far a change at one position of a dim reaches along that dim of the outputs, measured on
    the probe's inputs: each floating input is changed at the dim's first position (then at its
    last), and the output positions along the dim that change, besides the changed one, are
    counted, as a fraction of the others (0: each position depends on its own inputs only, a batch
    dim; about 1: every position depends on the whole dim, a reduction, a softmax, a prefix sum;
    between: a window, as a convolution's). None where it cannot be told: the dim is not one
    output axis (absent, or its size is another dim's too), or the reference raised."""
    found: Dict[str, Optional[float]] = {}
    base = make_inputs(names, example, axes, sizes, domains)
    for d, n in sizes.items():
        if n < 2:
            continue
        where = [[k for k, s in enumerate(o.shape) if int(s) == n] for o in outs]
        if any(len(w) > 1 for w in where) or sum(1 for other in sizes.values() if other == n) > 1 \
                or not any(where):
            found[d] = None
            continue
        reach = 0.0
        for pos in (0, n - 1):
            inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in base]
            touched = False
            for k, (name, ex) in enumerate(zip(names, example)):
                if not (isinstance(ex, torch.Tensor) and ex.is_floating_point()):
                    continue
                for ax, a in enumerate(axes[name]):
                    if a == d:
                        inputs[k].select(ax, pos).mul_(1.5).add_(0.25)
                        touched = True
            if not touched:  # only in integer inputs: no value of it to change
                reach = None
                break
            try:
                with torch.no_grad():
                    out = call(*inputs)
            except Exception:  # noqa: BLE001 - the reference's own error: not measurable
                reach = None
                break
            changed = [o for o in (list(out) if isinstance(out, (tuple, list)) else [out])]
            for o0, o1, w in zip(outs, changed, where):
                if not w:
                    continue
                diff = ~((o0 == o1) | (torch.isnan(o0) & torch.isnan(o1)))
                moved = diff.movedim(w[0], 0).reshape(n, -1).any(dim=1)
                moved[pos] = False
                reach = max(reach, float(moved.sum()) / (n - 1))
        found[d] = reach
    return found


def _reduced(d: str, spreads: Dict[str, Optional[float]], sizes: Dict[str, int], out_sizes: set) -> bool:
    """A dim the outputs are reduced over: no output keeps its size, or a change at one of its
    positions reaches at least half of the others."""
    if sizes[d] not in out_sizes:
        return True
    r = spreads.get(d)
    return r is not None and r >= 0.5


def _role(d: str, spreads: Dict[str, Optional[float]], sizes: Dict[str, int], out_sizes: set,
          names: Sequence[str], example: Sequence[Any], axes: Dict[str, List[Any]]) -> str:
    """The dim's role, which decides how long its sizes are drawn: a reduction's long (its
    accumulation is what breaks), a batch dim's short."""
    if _reduced(d, spreads, sizes, out_sizes):
        return "reduction"
    if spreads.get(d) is not None:
        return "batch" if spreads[d] == 0 else "spatial"
    # not measurable: most likely reduced over when it is among the last two dims of a floating
    # input (norms, softmax, a GEMM's K, attention's keys)
    last = any(isinstance(ex, torch.Tensor) and ex.is_floating_point() and d in axes[n][-2:]
               for n, ex in zip(names, example))
    return "reduction" if last else "batch"


def _elements(names, example, axes, sizes) -> int:
    n = 0
    for name, ex in zip(names, example):
        if isinstance(ex, torch.Tensor):
            n += math.prod(sizes[a] if isinstance(a, str) else int(a) for a in axes[name])
    return n


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def infer(name: str, call: Callable[..., Any], example: Sequence[Any], names: Sequence[str],
          param_sizes: Dict[int, str], size_names: Optional[Dict[int, str]] = None,
          dims: Optional[Dict[str, Sequence[Any]]] = None, pin: Optional[Dict[str, int]] = None,
          bound: Optional[Dict[str, Tuple[int, int]]] = None, index: Optional[Dict[str, Any]] = None,
          dtypes: Optional[Sequence[str]] = None, max_elements: Optional[int] = None,
          consumers: Optional[Dict[str, set]] = None, int_ranges: Optional[Dict[str, Tuple[int, int]]] = None,
          summary: str = "") -> Inferred:
    """The schema of ``call(*example)``. ``param_sizes``: sizes a parameter or buffer holds (size
    -> where); ``size_names``: names to give dims of a size (a KernelBench problem's module-level
    constants); ``dims``, ``pin``, ``bound``, ``index``: the caller's word (docs/torch-ops.md)."""
    notes: List[str] = []
    if not re.match(r"^[a-z][a-z0-9_]*$", name):
        raise ValidationError(f"op name {name!r}: lower case letters, digits and _, starting with a letter")
    if len(names) != len(example):
        raise ValidationError(f"{len(example)} example inputs for {len(names)} names")
    axes: Dict[str, List[Any]] = {}
    scalars: Dict[str, Any] = {}
    size_of: Dict[str, int] = {}  # dim -> example size
    by_size: Dict[int, str] = {}
    counter = [0]

    def dim_for(size: int) -> str:
        if size in by_size:
            return by_size[size]
        cand = (size_names or {}).get(size)
        if cand is None or not _NAME.match(cand) or cand in size_of or cand in names:
            while f"D{counter[0]}" in size_of:
                counter[0] += 1
            cand = f"D{counter[0]}"
            counter[0] += 1
        by_size[size] = cand
        size_of[cand] = size
        return cand

    for n, ex in zip(names, example):
        if isinstance(ex, bool) or isinstance(ex, (int, float)):
            scalars[n] = ex
            continue
        if not isinstance(ex, torch.Tensor):
            raise ValidationError(f"input '{n}': an example input must be a tensor or a number, got "
                                  f"{type(ex).__name__}")
        if dims and n in dims:
            given = list(dims[n])
            if len(given) != ex.dim():
                raise ValidationError(f"dims['{n}'] names {len(given)} dims; the example has {ex.dim()}")
            ax = []
            for g, s in zip(given, ex.shape):
                if isinstance(g, int):
                    if g != s:
                        raise ValidationError(f"dims['{n}']: {g} where the example has {s}")
                    ax.append(g)
                    continue
                if not _NAME.match(str(g)):
                    raise ValidationError(f"dims['{n}']: {g!r} is not a dim name")
                if g in size_of and size_of[g] != s:
                    raise ValidationError(f"dim '{g}' is {size_of[g]} in one input and {s} in '{n}'")
                size_of[g] = int(s)
                ax.append(str(g))
            axes[n] = ax
        else:
            axes[n] = [1 if s == 1 else dim_for(int(s)) for s in ex.shape]

    # Fixed dims: the caller's pins, then the sizes the module's parameters hold.
    fixed: Dict[str, str] = {}
    for d, v in (pin or {}).items():
        if d not in size_of:
            raise ValidationError(f"pin: no dim '{d}' (the dims are {', '.join(sorted(size_of)) or 'none'})")
        size_of[d] = int(v)
        fixed[d] = "pinned by the caller"
    for d, s in size_of.items():
        if d not in fixed and s in param_sizes and not (bound and d in bound):
            fixed[d] = f"fixed by {param_sizes[s]}"
    for d in (bound or {}):
        if d not in size_of:
            raise ValidationError(f"bound: no dim '{d}' (the dims are {', '.join(sorted(size_of)) or 'none'})")

    # Integer inputs: their values' domain ([lo, hi]); index inputs: [0, n) for a dim or a number.
    domains: Dict[str, Tuple[int, int]] = {}
    domain_text: Dict[str, str] = {}
    for n, ex in zip(names, example):
        if not isinstance(ex, torch.Tensor) or ex.is_floating_point() or ex.dtype == torch.bool:
            continue
        if index and n in index:
            v = index[n]
            if isinstance(v, str):
                if v not in size_of:
                    raise ValidationError(f"index['{n}']: no dim '{v}'")
                domains[n] = (0, size_of[v] - 1)
                domain_text[n] = f"indices:{v}"
            else:
                domains[n] = (0, int(v) - 1)
                domain_text[n] = f"indices:{int(v)}"
            continue
        if int_ranges and n in int_ranges:
            lo, hi = int_ranges[n]
        elif ex.device.type == "meta":
            raise ValidationError(f"input '{n}': an integer input of unknown values; mark it with index={{'{n}': ...}}")
        else:
            lo = int(ex.min()) if ex.numel() else 0
            hi = int(ex.max()) if ex.numel() else 0
        if lo < 0:
            raise ValidationError(f"input '{n}': integer values below 0; mark it with index={{'{n}': ...}}")
        domains[n] = (0, hi)
        domain_text[n] = f"indices:{hi + 1}"

    def run(sizes: Dict[str, int]) -> Optional[BaseException]:
        if _elements(names, example, axes, sizes) > PROBE_ELEMENTS:
            return OverflowError("too large to probe")
        try:
            with torch.no_grad():
                call(*make_inputs(names, example, axes, sizes, domains))
        except Exception as exc:  # the reference's own error: it says why the size cannot change
            return exc
        return None

    free = [d for d in size_of if d not in fixed]
    small = dict(size_of)
    for k, d in enumerate(free):
        small[d] = _PRIMES[k % len(_PRIMES)] + (k // len(_PRIMES)) * 53
    err = run(small)
    if err is not None:
        # one dim at a time: those the reference cannot take at another size are fixed
        for d in list(free):
            trial = dict(small)
            trial[d] = size_of[d]
            if run(trial) is None:
                fixed[d] = f"fixed: the reference raised {_first_line(err)} at {d}={small[d]}"
                notes.append(f"dim {d} fixed at {size_of[d]}: the reference raised {_first_line(err)} "
                             f"with {d}={small[d]}")
                small[d] = size_of[d]
                free.remove(d)
                err = run(small)
                if err is None:
                    break
        if err is not None:
            for d in list(free):
                fixed[d] = "fixed: the reference takes no other size"
                small[d] = size_of[d]
            free = []
            notes.append(f"every dim fixed at its example size: the reference raised {_first_line(err)} at "
                         "smaller sizes")
    # Each free dim's smallest size: the first the reference takes, from 1 up (a 3x3 convolution
    # without padding needs 3), the others at their probe sizes.
    lows: Dict[str, int] = {}
    for d in free:
        first_err = None
        lows[d] = small[d]
        for size in range(1, small[d]):
            trial = dict(small)
            trial[d] = size
            e1 = run(trial)
            if e1 is None:
                lows[d] = size
                break
            first_err = first_err or e1
        if lows[d] > 1 and first_err is not None:
            notes.append(f"dim {d} starts at {lows[d]}: the reference raised {_first_line(first_err)} with {d}=1")
    for d, reason in fixed.items():
        if reason.startswith("fixed by"):
            notes.append(f"dim {d} fixed at {size_of[d]} ({reason})")

    # The output's dims at the probe: a dim absent from every output is reduced over.
    out_sizes: set = set()
    try:
        with torch.no_grad():
            out = call(*make_inputs(names, example, axes, small, domains))
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
    except Exception as exc:
        raise ValidationError(f"the reference raised {_first_line(exc)} on inputs of the example's shapes "
                              "(probe)") from None
    for o in outs:
        if not isinstance(o, torch.Tensor):
            raise ValidationError(f"the reference returned a {type(o).__name__}: it must return tensors")
        out_sizes.update(int(s) for s in o.shape)
    spreads = _spreads(call, names, example, axes, small, domains, outs)

    dim_specs: Dict[str, Any] = {}
    for d, s in size_of.items():
        if d in fixed:
            dim_specs[d] = {"values": [s], "description": fixed[d]}
            continue
        lo, hi = lows.get(d, 1), max(s, 1024)
        if bound and d in bound:
            lo, hi = int(bound[d][0]), int(bound[d][1])
            if lo < 1 or hi < lo:
                raise ValidationError(f"bound['{d}']: ({lo}, {hi}) is not a range of sizes >= 1")
        dim_specs[d] = {"min": lo, "max": hi, "role": _role(d, spreads, small, out_sizes, names, example, axes),
                        "description": f"example size {s}"}

    inputs: List[Dict[str, Any]] = []
    for n, ex in zip(names, example):
        if not isinstance(ex, torch.Tensor):
            continue
        dt, floating = _tensor_spec(ex)
        spec: Dict[str, Any] = {"name": n, "shape": [a if isinstance(a, str) else str(a) for a in axes[n]],
                                "dtype": dt}
        if floating:
            spec["domain"] = "real"
            spec["values"] = _recipe((consumers or {}).get(n, set()))
        elif n in domain_text:
            spec["domain"] = domain_text[n]
        if ex.dim() >= 1:
            spec["layouts"] = ["transposed", "strided", "offset", "expanded"]
        inputs.append(spec)
    if not inputs:
        raise ValidationError("the example inputs hold no tensor")
    outputs = []
    for k, o in enumerate(outs):
        dt, floating = _tensor_spec(o)
        outputs.append({"name": "out" if len(outs) == 1 else f"out{k}", "shape": "computed by the reference",
                        "dtype": dt})
    attrs = {}
    for n, v in scalars.items():
        t = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float"
        attrs[n] = {"type": t, "default": v, "description": "the example's value (not varied)"}
    schema = {
        "name": name, "version": 1, "summary": summary or f"inferred from PyTorch code ({name})", "family": "custom",
        "dtypes": list(dtypes or ("float32", "float16", "bfloat16")), "dims": dim_specs, "inputs": inputs,
        "attrs": attrs, "outputs": outputs,
        # what the diagnosis reads as a reduction's length: only the dims measured to be reduced over
        # (a fixed one too: a norm over a weight's width reduces, and rules out "a wrong constant")
        "reduced_dims": [d for d in dim_specs if _reduced(d, spreads, small, out_sizes)],
        "max_elements": int(max_elements or (1 << 18)), "reference": f"torch:{name}",
    }
    return Inferred(schema=schema, axes=axes, scalars=scalars, notes=notes, probe_sizes=small, domains=domains)


def _recipe(ops: set) -> str:
    """An input's recipe from the user-level ops its values reach ((op, through a GEMM) pairs): a
    softmax anywhere downstream makes it logits (attention's q and k); a normalisation reached
    before any GEMM, a norm's rows; a reduction, GEMM or convolution, accumulated terms; else an
    elementwise operand's wide magnitudes."""
    names = {op for op, _ in ops}
    direct = {op for op, mixed in ops if not mixed}
    if names & _LOGITS:
        return "logits"
    if direct & _NORM:
        return "norm"
    if names & _ACCUMULATED:
        return "accumulated"
    return "wide"


def schema_text(schema: Dict[str, Any]) -> str:
    return json.dumps(schema, indent=1)
