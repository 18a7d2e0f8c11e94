"""The derived bound of a numpy reference (a custom op's, docs/custom-ops.md), for references that
return values only.

The reference runs on ``BoundArray``s: duck arrays (NEP 13 and 18: ``__array_ufunc__``,
``__array_function__``) that carry a float64 value with its bounds. Each numpy call maps onto the
PyTorch op of the same meaning, evaluated by _bounds (the same rules, the same decompositions,
inside the same float64 dispatch mode), so a numpy reference's c_acc and c_in are derived as a
PyTorch reference's are. A numpy function without a counterpart here raises UnsupportedOpError
naming it.

This module imports nothing of gpuemu but _bounds and _growth: the daemon's script runner loads it
by path (docs/script-kernels.md), where the gpuemu package (its compiled module) is not imported.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch

from ._bounds import BoundTensor, UnsupportedOpError, _Float64Mode, _STATE, _UNIT, exact

def _t(x: Any) -> Any:
    """The torch side of an operand."""
    if isinstance(x, BoundArray):
        return x.t
    if isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
        return exact(t.to(torch.float64) if t.is_floating_point() else t)
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (list, tuple)):
        return type(x)(_t(a) for a in x)
    return x


def _wrap(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return BoundArray(x)
    if isinstance(x, (tuple, list)):
        return type(x)(_wrap(a) for a in x)
    return x


def _axis(axis: Any) -> Any:
    if axis is None:
        return None
    return list(axis) if isinstance(axis, tuple) else axis


def _reduce(fn: Callable, x: Any, axis: Any = None, keepdims: bool = False, **kw: Any) -> Any:
    t = _t(x)
    if axis is None:
        dims = list(range(t.dim()))
        return fn(t, dims, keepdims) if dims else t
    return fn(t, _axis(axis) if isinstance(axis, (list, tuple)) else [axis], keepdims)


_UFUNCS: Dict[str, Callable[..., Any]] = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "true_divide": torch.div, "divide": torch.div,
    "power": torch.pow, "negative": torch.neg, "positive": lambda a: a, "absolute": torch.abs, "fabs": torch.abs,
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2,
    "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt, "square": torch.square, "tanh": torch.tanh,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "arctan": torch.atan, "sinh": torch.sinh,
    "cosh": torch.cosh, "reciprocal": torch.reciprocal, "maximum": torch.maximum, "minimum": torch.minimum,
    "fmax": torch.fmax, "fmin": torch.fmin, "greater": torch.gt, "greater_equal": torch.ge, "less": torch.lt,
    "less_equal": torch.le, "equal": torch.eq, "not_equal": torch.ne, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "logical_not": torch.logical_not, "floor": torch.floor, "ceil": torch.ceil,
    "trunc": torch.trunc, "rint": torch.round, "sign": torch.sign, "matmul": torch.matmul,
    "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
}
_REDUCE = {"add": lambda t, d, k: torch.sum(t, d, keepdim=k), "maximum": lambda t, d, k: torch.amax(t, d, keepdim=k),
           "minimum": lambda t, d, k: torch.amin(t, d, keepdim=k),
           "multiply": lambda t, d, k: _prod(t, d, k)}


def _prod(t, dims, keepdim):
    for d in sorted(dims, reverse=True):
        t = torch.prod(t, d, keepdim=True)
    if not keepdim:
        for d in sorted(dims, reverse=True):
            t = t.squeeze(d)
    return t


def _var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    t = _t(x)
    dims = list(range(t.dim())) if axis is None else (_axis(axis) if isinstance(axis, (list, tuple)) else [axis])
    return torch.var(t, dims, correction=ddof, keepdim=keepdims)


_FUNCTIONS: Dict[Any, Callable[..., Any]] = {
    np.sum: lambda x, axis=None, dtype=None, out=None, keepdims=False, **kw: _reduce(_REDUCE["add"], x, axis, keepdims),
    np.mean: lambda x, axis=None, dtype=None, out=None, keepdims=False, **kw: _reduce(
        lambda t, d, k: torch.mean(t, d, keepdim=k), x, axis, keepdims),
    np.max: lambda x, axis=None, out=None, keepdims=False, **kw: _reduce(_REDUCE["maximum"], x, axis, keepdims),
    np.amax: lambda x, axis=None, out=None, keepdims=False, **kw: _reduce(_REDUCE["maximum"], x, axis, keepdims),
    np.min: lambda x, axis=None, out=None, keepdims=False, **kw: _reduce(_REDUCE["minimum"], x, axis, keepdims),
    np.amin: lambda x, axis=None, out=None, keepdims=False, **kw: _reduce(_REDUCE["minimum"], x, axis, keepdims),
    np.prod: lambda x, axis=None, dtype=None, out=None, keepdims=False, **kw: _reduce(_REDUCE["multiply"], x, axis, keepdims),
    np.var: _var,
    np.std: lambda *a, **k: torch.sqrt(_var(*a, **k)),
    np.argmax: lambda x, axis=None, out=None, keepdims=False: torch.argmax(_t(x), axis, keepdim=keepdims),
    np.argmin: lambda x, axis=None, out=None, keepdims=False: torch.argmin(_t(x), axis, keepdim=keepdims),
    np.cumsum: lambda x, axis=None, dtype=None, out=None: torch.cumsum(_t(x) if axis is not None else _t(x).reshape(-1), axis or 0),
    np.matmul: lambda a, b, **kw: torch.matmul(_t(a), _t(b)),
    np.dot: lambda a, b, out=None: torch.matmul(_t(a), _t(b)),
    np.einsum: lambda spec, *ops, **kw: torch.einsum(spec, *[_t(o) for o in ops]),
    np.where: lambda c, a, b: torch.where(_t(c), _t(a), _t(b)),
    np.clip: lambda x, lo, hi, out=None, **kw: torch.clamp(_t(x), _t(lo), _t(hi)),
    np.abs: lambda x, **kw: torch.abs(_t(x)),
    np.exp: lambda x, **kw: torch.exp(_t(x)),
    np.log: lambda x, **kw: torch.log(_t(x)),
    np.sqrt: lambda x, **kw: torch.sqrt(_t(x)),
    np.tanh: lambda x, **kw: torch.tanh(_t(x)),
    np.maximum: lambda a, b, **kw: torch.maximum(_t(a), _t(b)),
    np.minimum: lambda a, b, **kw: torch.minimum(_t(a), _t(b)),
    np.square: lambda x, **kw: torch.square(_t(x)),
    np.reshape: lambda x, newshape, order="C": torch.reshape(_t(x), tuple(np.atleast_1d(newshape).tolist()) if not isinstance(newshape, int) else (newshape,)),
    np.transpose: lambda x, axes=None: _t(x).permute(*(axes or range(_t(x).dim() - 1, -1, -1))),
    np.swapaxes: lambda x, a, b: _t(x).transpose(a, b),
    np.moveaxis: lambda x, s, d: torch.movedim(_t(x), s, d),
    np.expand_dims: lambda x, axis: _t(x).unsqueeze(axis),
    np.squeeze: lambda x, axis=None: _t(x).squeeze() if axis is None else _t(x).squeeze(axis),
    np.broadcast_to: lambda x, shape, subok=False: _t(x).expand(*shape),
    np.concatenate: lambda arrs, axis=0, **kw: torch.cat([_t(a) for a in arrs], axis),
    np.stack: lambda arrs, axis=0, **kw: torch.stack([_t(a) for a in arrs], axis),
    np.take_along_axis: lambda x, idx, axis: torch.gather(_t(x), axis, _t(idx)),
    np.zeros_like: lambda x, dtype=None, **kw: torch.zeros_like(_t(x)),
    np.ones_like: lambda x, dtype=None, **kw: torch.ones_like(_t(x)),
    np.full_like: lambda x, v, dtype=None, **kw: torch.full_like(_t(x), v),
    np.copy: lambda x, **kw: _t(x).clone(),
    np.linalg.norm: lambda x, ord=None, axis=None, keepdims=False: torch.linalg.vector_norm(
        _t(x), 2 if ord is None else ord, dim=axis, keepdim=keepdims),
}


class BoundArray:
    """A numpy-like array whose value is a BoundTensor (float64 with its bounds)."""

    __array_priority__ = 1000

    def __init__(self, t: Any) -> None:
        self.t = t

    # --- what numpy asks of a duck array ----------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        kwargs.pop("out", None)
        kwargs.pop("dtype", None)
        kwargs.pop("casting", None)
        if method == "__call__":
            fn = _UFUNCS.get(ufunc.__name__)
            if fn is None:
                raise UnsupportedOpError(f"numpy.{ufunc.__name__} has no error rule")
            return _wrap(fn(*[_t(a) for a in inputs], **kwargs))
        if method == "reduce" and ufunc.__name__ in _REDUCE:
            return _wrap(_reduce(_REDUCE[ufunc.__name__], inputs[0], kwargs.get("axis", 0),
                                 bool(kwargs.get("keepdims", False))))
        if method == "accumulate" and ufunc.__name__ == "add":
            return _wrap(torch.cumsum(_t(inputs[0]), kwargs.get("axis", 0)))
        raise UnsupportedOpError(f"numpy.{ufunc.__name__}.{method} has no error rule")

    def __array_function__(self, func, types, args, kwargs):
        fn = _FUNCTIONS.get(func)
        if fn is None:
            raise UnsupportedOpError(f"numpy.{getattr(func, '__name__', func)} has no error rule")
        return _wrap(fn(*args, **kwargs))

    # --- the ndarray surface references use --------------------------------------------------------
    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.t.shape)

    @property
    def ndim(self) -> int:
        return self.t.dim()

    @property
    def size(self) -> int:
        return int(self.t.numel())

    @property
    def dtype(self):
        return np.dtype("float64") if self.t.dtype.is_floating_point else np.dtype(str(self.t.dtype).replace("torch.", ""))

    @property
    def T(self) -> "BoundArray":
        return BoundArray(self.t.permute(*range(self.t.dim() - 1, -1, -1)))

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def __getitem__(self, idx: Any) -> "BoundArray":
        return BoundArray(self.t[_t(idx) if not isinstance(idx, tuple) else tuple(_t(i) for i in idx)])

    def reshape(self, *shape: Any, **kw: Any) -> "BoundArray":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return BoundArray(self.t.reshape(*shape))

    def transpose(self, *axes: Any) -> "BoundArray":
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return BoundArray(self.t.permute(*(axes or range(self.t.dim() - 1, -1, -1))))

    def astype(self, dtype: Any, **kw: Any) -> "BoundArray":
        name = np.dtype(dtype).name
        if name in ("float64",):
            return self
        if name in ("float32", "float16"):
            return BoundArray(self.t.to(getattr(torch, name)))
        return BoundArray(self.t.to(getattr(torch, name)))

    def copy(self) -> "BoundArray":
        return BoundArray(self.t.clone())

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        return _wrap(_FUNCTIONS[np.sum](self, axis, keepdims=keepdims))

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        return _wrap(_FUNCTIONS[np.mean](self, axis, keepdims=keepdims))

    def max(self, axis=None, out=None, keepdims=False):
        return _wrap(_FUNCTIONS[np.max](self, axis, keepdims=keepdims))

    def min(self, axis=None, out=None, keepdims=False):
        return _wrap(_FUNCTIONS[np.min](self, axis, keepdims=keepdims))

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return _wrap(_var(self, axis, ddof=ddof, keepdims=keepdims))

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return _wrap(torch.sqrt(_var(self, axis, ddof=ddof, keepdims=keepdims)))

    def argmax(self, axis=None):
        return _wrap(torch.argmax(self.t, axis))

    def clip(self, lo=None, hi=None):
        return _wrap(torch.clamp(self.t, _t(lo), _t(hi)))

    def cumsum(self, axis=None):
        return _wrap(_FUNCTIONS[np.cumsum](self, axis))

    def __array__(self, dtype=None):
        raise UnsupportedOpError("the reference turned a traced array into a plain numpy array (np.asarray, "
                                 "float(), a loop over its values): its error bound cannot follow that")

    def __float__(self) -> float:
        return float(self.t.v)

    def __bool__(self) -> bool:
        return bool(self.t.v)


def _binop(name: str, reflected: bool = False):
    uf = getattr(np, name)

    def op(self, other):
        return uf(other, self) if reflected else uf(self, other)
    return op


for _name, _uf in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "true_divide"),
                   ("pow", "power"), ("matmul", "matmul"), ("gt", "greater"), ("ge", "greater_equal"),
                   ("lt", "less"), ("le", "less_equal"), ("eq", "equal"), ("ne", "not_equal")):
    setattr(BoundArray, f"__{_name}__", _binop(_uf))
    if _name in ("add", "sub", "mul", "truediv", "pow", "matmul"):
        setattr(BoundArray, f"__r{_name}__", _binop(_uf, reflected=True))
BoundArray.__neg__ = lambda self: np.negative(self)  # type: ignore[attr-defined]
BoundArray.__abs__ = lambda self: np.absolute(self)  # type: ignore[attr-defined]
BoundArray.__and__ = lambda self, o: np.logical_and(self, o)  # type: ignore[attr-defined]
BoundArray.__or__ = lambda self, o: np.logical_or(self, o)  # type: ignore[attr-defined]
BoundArray.__invert__ = lambda self: np.logical_not(self)  # type: ignore[attr-defined]


def derive(fn: Callable[[Dict[str, Any]], Any], inputs: Dict[str, Any], outputs: int) -> List[np.ndarray]:
    """c_acc per output of a numpy reference ``fn`` called as the runner calls it (every input by
    name as float64, attrs by name): what a correct kernel computing it in fp32 may be off by.
    (No c_in: a custom op's model is fp32 arithmetic, docs/custom-ops.md.) ``outputs``: how many
    the op has."""
    _STATE.u_in = _UNIT[torch.float32]
    _STATE.depth = 0
    _STATE.nominal = None
    args = {}
    for k, v in inputs.items():
        if isinstance(v, np.ndarray):
            t = torch.from_numpy(np.ascontiguousarray(v))
            args[k] = BoundArray(exact(t, torch.float32 if t.is_floating_point() else None))
        else:
            args[k] = v
    with torch.no_grad(), _Float64Mode():
        out = fn(args)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != outputs:
        raise UnsupportedOpError(f"the reference returned {len(outs)} arrays under the error analysis, where the op "
                                 f"has {outputs} outputs")
    result = []
    for o in outs:
        t = o.t if isinstance(o, BoundArray) else None
        if not isinstance(t, BoundTensor):
            raise UnsupportedOpError("an output of the reference is not computed from its inputs")
        result.append(t.e.numpy().copy())
    return result
