"""The fp64 reference of a PyTorch function, with the error a correct implementation may make.

``evaluate(fn, args, case_dtype)`` runs ``fn`` (any PyTorch code: a function, an ``nn.Module``'s
forward) in float64 on the exact values of ``args`` and returns, for every floating output, its
value and two bounds, both first-order running-error analyses (Wilkinson's) carried op by op
beside the value through ``__torch_dispatch__``:

- ``c_acc`` (units of u_fp32): what a correct kernel that computes every intermediate in fp32 may
  be off by. Each primitive adds its own rounding and carries its operands' bounds through its
  slope: add adds them, mul weights each by the other's magnitude, exp multiplies by the output,
  a reduction adds its terms' bounds and its own growth times sum|t| (gpuemu.torch_ops._growth:
  sqrt(n), more over near-equal, repeated or absorbed terms), a GEMM or a convolution the same over
  |A|@|B|. Composite ops (layer_norm, softmax, gelu, var, ...) go through PyTorch's decomposition
  tables into those primitives, so their term is derived, not written by hand.
- ``c_in`` (units of the case dtype's u): what rounding every user-level op's result to the case
  dtype may add, as PyTorch itself does when it runs the same code in float16 or bfloat16 (an
  unfused composition). Zero for float32 cases (c_acc holds those roundings).

A decision the values cannot resolve (a comparison, an argmax, a floor whose operands are within
their bounds of the threshold) makes what depends on it uncertain: a `where` on an uncertain
condition may take either branch (its bound covers both), an index that may be another one makes
the elements it selects unresolvable (an infinite bound: the case is inconclusive there).

A reference that draws random numbers, or calls an op no rule or decomposition covers, is refused
with the op's name (`UnsupportedOpError`).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ._growth import sum_growth

class _Missing:
    """An op (or overload) this PyTorch does not have: a placeholder no call matches, whose
    overloads are placeholders too (the tables below name ops of PyTorch 1.13 to 2.11, and each
    release adds and drops some: torch 2.11 has no prims.slice)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.name}.{attr}")

    def __eq__(self, other):
        return isinstance(other, _Missing) and other.name == self.name

    def __hash__(self):
        return hash(("missing op", self.name))

    def __repr__(self):
        return f"<missing op {self.name}>"


class _Namespace:
    """torch.ops.aten or torch.ops.prims, where an op this PyTorch does not have is a `_Missing`."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, name: str):
        try:
            return getattr(getattr(torch.ops, self._name), name)
        except (AttributeError, RuntimeError):
            return _Missing(f"{self._name}.{name}")


aten = _Namespace("aten")
U32 = 2.0 ** -24
F64 = torch.float64
INF = float("inf")
_FLT_MIN_U = 2.0 ** -126 / 2.0 ** -24  # fp32's smallest normal, in units of u_fp32
_UNIT = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float64: 2.0 ** -53}


class UnsupportedOpError(RuntimeError):
    """The reference calls an op the error analysis has no rule for (or draws random numbers)."""


# --- the tensor that carries its bounds ------------------------------------------------------------

class BoundTensor(torch.Tensor):
    """A float64 (or integer/bool) value ``v`` with its bounds: ``e`` (fp32 arithmetic, units of
    u_fp32) and ``i`` (rounding to the case dtype at op boundaries, units of its u). For integer
    and bool values ``e`` is 0 where the value is certain and inf where another value is possible."""

    v: torch.Tensor
    e: torch.Tensor
    i: torch.Tensor

    @staticmethod
    def __new__(cls, v: torch.Tensor, e: torch.Tensor, i: torch.Tensor, dtype: Optional[torch.dtype] = None):
        # The wrapper shows the dtype the reference computes in (its nominal dtype: the case dtype,
        # float32 after a .float(), ...), so that PyTorch's composite code sees consistent dtypes;
        # a floating value is float64 underneath.
        if dtype is None:
            dtype = (_STATE.nominal or torch.float32) if v.is_floating_point() else v.dtype
        r = torch.Tensor._make_wrapper_subclass(cls, v.size(), strides=v.stride(), storage_offset=v.storage_offset(),
                                                dtype=dtype, device=v.device, requires_grad=False)
        r.v, r.e, r.i = v, e, i
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self) -> str:  # never the wrapper's (it has no data)
        return f"BoundTensor(v={self.v!r}, max e={float(self.e.max()) if self.e.numel() else 0.0})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


def _zeros(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros(t.shape, dtype=F64)


def _storage_elements(v: torch.Tensor) -> int:
    return (v.untyped_storage().nbytes() // v.element_size() if hasattr(v, "untyped_storage")
            else v.storage().size())  # torch < 2.0


def exact(v: torch.Tensor, dtype: Optional[torch.dtype] = None) -> BoundTensor:
    """An input known exactly: its value in float64 and zero bounds, all three in the input's own
    layout (sizes, strides, storage offset). A view op that PyTorch dispatches with strides
    computed for the original (as_strided, from a reshape of a non-contiguous input) must find the
    same elements in each: `.to` would make a non-dense view contiguous, and zeros of its shape
    alone would be read past their end (a linear over x with strides (888, 2) and an offset was
    off by 1e4, and its bound was garbage)."""
    nominal = dtype or v.dtype
    if v.layout != torch.strided or v.is_contiguous():
        v = v.to(F64) if v.is_floating_point() else v
        return BoundTensor(v, _zeros(v), _zeros(v), nominal)
    n = _storage_elements(v)
    size, stride, offset = v.size(), v.stride(), v.storage_offset()
    same = lambda t: t.as_strided(size, stride, offset)  # noqa: E731
    value = same(torch.as_strided(v, (n,), (1,), 0).to(F64)) if v.is_floating_point() else v
    return BoundTensor(value, same(torch.zeros(n, dtype=F64)), same(torch.zeros(n, dtype=F64)), nominal)


class _State(threading.local):
    depth = 0
    u_in = U32  # the case dtype's unit roundoff: user-level results in a 16-bit dtype carry c_in
    boundaries = True  # round each user-level op's result to the case dtype (off: a fused kernel)
    nominal: Optional[torch.dtype] = None  # the dtype PyTorch would give the current op's result
    ops: Optional[set] = None  # the aten ops the reference called (the dispatch trace)
    consumers: Optional[Dict[str, set]] = None  # input name -> the user-level ops that read it


_STATE = _State()


def _val(x: Any) -> Any:
    if isinstance(x, BoundTensor):
        return x.v
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(F64)
    return x


def _parts(x: Any, like: Optional[torch.Tensor] = None) -> Tuple[Any, Any, Any]:
    """(value, e, i) of an operand: a BoundTensor's own; a plain tensor or a Python number is exact,
    except a float constant fp32 cannot hold exactly (the kernel's fp32 copy is half an ulp off)."""
    if isinstance(x, BoundTensor):
        return x.v, x.e, x.i
    if isinstance(x, torch.Tensor):
        v = x.to(F64) if x.is_floating_point() else x
        z = _zeros(v)
        return v, z, z
    if isinstance(x, bool) or isinstance(x, int):
        return x, 0.0, 0.0
    if isinstance(x, float):
        off = 0.0 if (not math.isfinite(x) or float(torch.tensor(x, dtype=torch.float32)) == x) else 0.5 * abs(x)
        return x, off, 0.0
    return x, 0.0, 0.0


def _abs(x: Any) -> Any:
    return x.abs() if isinstance(x, torch.Tensor) else abs(x)


def _finite(t: torch.Tensor) -> torch.Tensor:
    """t with non-finite entries as 0 (a bound's coefficient that is not finite: the value itself
    is non-finite there, and its propagation is the reference's, not the bound's)."""
    return torch.where(torch.isfinite(t), t, torch.zeros_like(t))


def _absolute(e: Any, i: Any) -> torch.Tensor:
    """A bound's absolute size: u_fp32 e + u_in i."""
    return U32 * torch.as_tensor(e, dtype=F64) + _STATE.u_in * torch.as_tensor(i, dtype=F64)


# Beyond first order. The slopes above hold while an operand's error is small next to the scale
# on which the op bends: an exponent known to within a few units, a divisor known to within a
# fraction of itself. Where it is not (scores of 9,500 rounded to bfloat16 before a softmax: each
# known to within 37), the first-order bound is not a bound: exp(x + 28) / exp(x) is e^28, not 29.
# So each bending op widens its slope to the exact change over the operand's interval, and where
# the interval leaves the op's domain or reaches a pole (a divisor that may be 0), the result is
# unknown (inf: unresolved, the case inconclusive) rather than bounded wrongly.

def _interval_factor(fn: Callable, x: torch.Tensor, v: torch.Tensor, slope: torch.Tensor, delta: torch.Tensor,
                     pole: Optional[float] = None) -> torch.Tensor:
    """max(|fn(x ± delta) - fn(x)|) / (slope delta), at least 1 (the first-order bound where it
    holds); inf where x ± delta leaves fn's domain or reaches ``pole``."""
    with torch.no_grad():
        worst = torch.maximum((fn(x + delta) - v).abs(), (fn(x - delta) - v).abs())
    first = slope * delta
    g = torch.where(first > 0, worst / torch.where(first > 0, first, torch.ones_like(first)), torch.ones_like(first))
    g = torch.where(torch.isnan(g), torch.full_like(g, INF), g)  # left the domain: log(x - delta <= 0)
    if pole is not None:
        g = torch.where((x - pole).abs() <= delta, torch.full_like(g, INF), g)
    g = torch.where(torch.isfinite(v), g, torch.ones_like(g))  # a non-finite value is the reference's own
    return torch.clamp(g, min=1.0)


def _divisor_factor(bv: Any, be: Any, bi: Any) -> Any:
    """1 / (1 - r) for a divisor known to within r of itself (|a/(b + d) - a/b| <= |a/b| r / (1 - r)),
    inf where r >= 1 (the divisor may be 0)."""
    if not isinstance(bv, torch.Tensor):
        bv = torch.as_tensor(float(bv), dtype=F64)
    d = _absolute(be, bi)
    if not bool((d > 0).any()):
        return 1.0
    r = torch.where(bv != 0, d / bv.abs().clamp(min=1e-300), torch.where(d > 0, torch.full_like(d, INF), torch.zeros_like(d)))
    return torch.where(r < 1, 1.0 / (1.0 - torch.clamp(r, max=0.999999)), torch.full_like(r, INF))


def _result(v: torch.Tensor, e: Any, i: Any, own: float = 1.0, chain: Optional[torch.Tensor] = None) -> BoundTensor:
    """A floating result: its bounds plus its own rounding (own * |v| in fp32, and |v| in the case
    dtype at a user-level op). ``chain``: the result is a sum of terms whose magnitudes add up to
    ``chain`` (see _chain_of); its own rounding is then own * chain, what the terms' partial sums
    may round by in any order a kernel adds them."""
    av = _finite(v.abs())
    mag = av if chain is None else torch.maximum(av, _finite(chain))
    # own rounding, and where the result leaves fp32's normal range a kernel may flush it to 0
    # (or round it to a subnormal): FLT_MIN absolutely, 2^-102 in units of u_fp32
    e = torch.broadcast_to(torch.as_tensor(e, dtype=F64), v.shape) + own * mag + (_FLT_MIN_U if own > 0 else 0.0)
    i = torch.broadcast_to(torch.as_tensor(i, dtype=F64), v.shape)
    nominal = _STATE.nominal or torch.float32
    if _STATE.depth == 1 and _STATE.boundaries and _UNIT.get(nominal, 0.0) > U32:  # PyTorch stores this op's result in 16 bits
        i = i + av * (_UNIT[nominal] / _STATE.u_in)
    out = BoundTensor(v, e.contiguous(), i.contiguous())
    if chain is not None:
        out.chain = torch.broadcast_to(chain, v.shape)
    return out


# Re-association and distribution. A kernel need not add a sum's terms in the reference's order:
# x - m - log(s) may be x - (m + log(s)) (a stored log-sum-exp), a layer norm's (x - mean) * rstd
# may be x * rstd - mean * rstd (PyTorch's own folded affine). Where an add or a product reads a
# value that is itself a sum of terms (its `chain`: the sum of their magnitudes), its own rounding
# is taken over those terms' magnitudes (any association), and a product by a plain value
# distributes over them. A product of two such sums is not distributed: (x - mean)^2 expanded is
# the one-pass variance, a formulation bug, not a kernel's freedom.
def _chain_of(x: Any) -> Optional[torch.Tensor]:
    return getattr(x, "chain", None) if isinstance(x, BoundTensor) else None


def _mag(x: Any) -> Any:
    c = _chain_of(x)
    if c is not None:
        return c
    v = _parts(x)[0]
    return _finite(v.abs()) if isinstance(v, torch.Tensor) else abs(v)


def _uncertain(v: torch.Tensor, unsure: torch.Tensor) -> BoundTensor:
    """An integer or bool result: inf where another value is possible."""
    e = torch.where(unsure, torch.full(v.shape, INF, dtype=F64), torch.zeros(v.shape, dtype=F64))
    return BoundTensor(v, e, torch.zeros(v.shape, dtype=F64))


# --- rules ---------------------------------------------------------------------------------------

RULES: Dict[Any, Callable] = {}


def rule(*ops):
    def reg(fn):
        for op in ops:
            RULES[op] = fn
        return fn
    return reg


def _bin(args, kwargs):
    a, b = args[0], args[1]
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    return _parts(a), _parts(b), alpha


def _sum_chain(a: Any, b: Any, alpha: Any = 1) -> Optional[torch.Tensor]:
    """The chain of a + alpha b: None when neither operand is a sum (a two-term add rounds once,
    whatever the order)."""
    if _chain_of(a) is None and _chain_of(b) is None:
        return None
    return torch.as_tensor(_mag(a), dtype=F64) + abs(alpha) * torch.as_tensor(_mag(b), dtype=F64)


@rule(aten.add, aten.sub)
def _add(func, args, kwargs):
    (av, ae, ai), (bv, be, bi), alpha = _bin(args, kwargs)
    sign = -1.0 if func.overloadpacket is aten.sub else 1.0
    v = av + sign * alpha * bv
    own = 1.0 if alpha == 1 else 2.0
    chain = _sum_chain(args[0], args[1], alpha)
    if chain is None:  # the two terms' magnitudes start a chain the next add may extend
        return _with_chain(_result(v, ae + abs(alpha) * be, ai + abs(alpha) * bi, own),
                           torch.as_tensor(_mag(args[0]), dtype=F64) + abs(alpha) * torch.as_tensor(_mag(args[1]), dtype=F64))
    return _result(v, ae + abs(alpha) * be, ai + abs(alpha) * bi, own, chain)


def _with_chain(out: BoundTensor, chain: torch.Tensor) -> BoundTensor:
    out.chain = torch.broadcast_to(chain, out.v.shape)
    return out


@rule(aten.rsub)
def _rsub(func, args, kwargs):
    (av, ae, ai), (bv, be, bi), alpha = _bin(args, kwargs)
    chain = _sum_chain(args[1], args[0], alpha)
    out = _result(bv - alpha * av, be + abs(alpha) * ae, bi + abs(alpha) * ai, 1.0 if alpha == 1 else 2.0, chain)
    if chain is None:
        out = _with_chain(out, torch.as_tensor(_mag(args[1]), dtype=F64) + abs(alpha) * torch.as_tensor(_mag(args[0]), dtype=F64))
    return out


@rule(aten.mul)
def _mul(func, args, kwargs):
    (av, ae, ai), (bv, be, bi), _ = _bin(args, kwargs)
    v = av * bv
    fa, fb = _finite(torch.as_tensor(_abs(bv), dtype=F64)), _finite(torch.as_tensor(_abs(av), dtype=F64))
    ca, cb = _chain_of(args[0]), _chain_of(args[1])
    chain = None
    if (ca is None) != (cb is None):  # a sum times a plain value: the product may be distributed
        chain = ca * fa if ca is not None else cb * fb
    # the second-order term |da db|, in the channels it comes from (fp32 arithmetic in e, op
    # boundaries' rounding in i): first order misses it where both operands' errors are large
    ee, ii = fa * ae + fb * be, fa * ai + fb * bi
    if _any_error(ae, ai) and _any_error(be, bi):
        ea, eb = torch.as_tensor(ae, dtype=F64), torch.as_tensor(be, dtype=F64)
        ia, ib = torch.as_tensor(ai, dtype=F64), torch.as_tensor(bi, dtype=F64)
        ee = ee + U32 * _mul0(ea, eb)  # (u ea)(u eb) / u
        ii = ii + (_STATE.u_in * _mul0(ia, ib) + U32 * (_mul0(ea, ib) + _mul0(ia, eb)))
    return _result(torch.as_tensor(v), ee, ii, 1.0, chain)


def _mul0(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a * b with 0 * inf = 0 (an exact operand keeps the product's cross term exact)."""
    return torch.where((a == 0) | (b == 0), torch.zeros(torch.broadcast_shapes(a.shape, b.shape), dtype=F64), a * b)


def _any_error(e: Any, i: Any) -> bool:
    return bool((torch.as_tensor(e) != 0).any()) or bool((torch.as_tensor(i) != 0).any())


@rule(aten.div, aten.true_divide)
def _div(func, args, kwargs):
    (av, ae, ai), (bv, be, bi), _ = _bin(args, kwargs)
    mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 and isinstance(args[2], str) else None)
    q = torch.as_tensor(av / bv if mode is None else torch.div(av, bv, rounding_mode=None), dtype=F64)
    inv = _finite(1.0 / torch.as_tensor(_abs(bv), dtype=F64))
    aq = _finite(q.abs())
    grow = _divisor_factor(bv, be, bi)  # beyond first order: a divisor far from known
    e = (inv * ae + aq * inv * be) * grow
    i = (inv * ai + aq * inv * bi) * grow
    if mode is None:
        ca = _chain_of(args[0]) if _chain_of(args[1]) is None else None
        return _result(q, e, i, 1.0, ca * inv if ca is not None else None)
    r = torch.div(av, bv, rounding_mode=mode)
    qe = e + aq  # the quotient's own rounding before it is truncated
    frac = torch.where(mode == "floor", q - torch.floor(q), (q - torch.trunc(q)).abs())
    unsure = torch.minimum(frac, 1.0 - frac) * 1.0 <= U32 * qe
    return _step(r, unsure)


def _step(v: torch.Tensor, unsure: torch.Tensor) -> BoundTensor:
    """The result of a step function (floor, round, trunc): exact where its argument is clear of
    a step, anywhere within one step elsewhere (a bound of 1 absolute)."""
    v = v.to(F64) if v.is_floating_point() else v
    if not v.is_floating_point():
        return _uncertain(v, unsure)
    e = torch.where(unsure, torch.full(v.shape, 1.0 / U32, dtype=F64), torch.zeros(v.shape, dtype=F64))
    return BoundTensor(v, e, torch.zeros(v.shape, dtype=F64))


@rule(aten.neg)
def _neg(func, args, kwargs):
    v, e, i = _parts(args[0])
    return BoundTensor(-v, e.clone(), i.clone())


@rule(aten.abs)
def _absr(func, args, kwargs):
    v, e, i = _parts(args[0])
    return BoundTensor(v.abs(), e.clone(), i.clone())


def _unary(fn: Callable, slope: Callable, own: float = 2.0, absolute: float = 0.0, arg_round: bool = True,
           bends: bool = True, pole: Optional[float] = None):
    """An elementwise f: e = |f'(x)| (e_x + |x| if the kernel rounds its argument on the way, as
    exp2(x log2 e) does) + own |f(x)| + absolute. ``bends``: the slope is widened to f's exact
    change over the argument's interval where first order falls short (_interval_factor; a
    periodic f, bounded absolutely, does not need it); ``pole``: where f is not defined."""
    def r(func, args, kwargs):
        x, e, i = _parts(args[0])
        v = fn(x)
        s = _finite(slope(x, v).abs())
        ea = e + (_finite(x.abs()) if arg_round else 0.0)
        if bends and _any_error(ea, i):
            g = _interval_factor(fn, x, v, s, _absolute(ea, i), pole)
            s = s * g
        ee = s * ea + absolute
        return _result(v, ee, s * i, own)
    return r


RULES[aten.exp] = _unary(torch.exp, lambda x, v: v)
RULES[aten.exp2] = _unary(torch.exp2, lambda x, v: v * math.log(2.0))
RULES[aten.expm1] = _unary(torch.expm1, lambda x, v: v + 1.0)
RULES[aten.log] = _unary(torch.log, lambda x, v: 1.0 / x, absolute=1.0, arg_round=False)
RULES[aten.log2] = _unary(torch.log2, lambda x, v: 1.0 / (x * math.log(2.0)), absolute=1.0, arg_round=False)
RULES[aten.log10] = _unary(torch.log10, lambda x, v: 1.0 / (x * math.log(10.0)), absolute=1.0, arg_round=False)
RULES[aten.log1p] = _unary(torch.log1p, lambda x, v: 1.0 / (1.0 + x), arg_round=False)
RULES[aten.tanh] = _unary(torch.tanh, lambda x, v: 1.0 - v * v)
RULES[aten.sigmoid] = _unary(torch.sigmoid, lambda x, v: v * (1.0 - v))
RULES[aten.sin] = _unary(torch.sin, lambda x, v: torch.cos(x), absolute=1.0, bends=False)
RULES[aten.cos] = _unary(torch.cos, lambda x, v: torch.sin(x), absolute=1.0, bends=False)
RULES[aten.tan] = _unary(torch.tan, lambda x, v: 1.0 + v * v, bends=False)  # poles every pi: first order
RULES[aten.atan] = _unary(torch.atan, lambda x, v: 1.0 / (1.0 + x * x))
RULES[aten.asin] = _unary(torch.asin, lambda x, v: 1.0 / torch.sqrt(1.0 - x * x))
RULES[aten.acos] = _unary(torch.acos, lambda x, v: 1.0 / torch.sqrt(1.0 - x * x))
RULES[aten.sinh] = _unary(torch.sinh, lambda x, v: torch.cosh(x))
RULES[aten.cosh] = _unary(torch.cosh, lambda x, v: torch.sinh(x))
RULES[aten.asinh] = _unary(torch.asinh, lambda x, v: 1.0 / torch.sqrt(1.0 + x * x))
RULES[aten.atanh] = _unary(torch.atanh, lambda x, v: 1.0 / (1.0 - x * x))
# erf near +-1 (1 + erf(x) in gelu for x << 0): its fp32 evaluation errs by a few ulps of 1,
# absolutely (docs/error-model.md: gelu's 8 * 0.5|x|)
RULES[aten.erf] = _unary(torch.erf, lambda x, v: 2.0 / math.sqrt(math.pi) * torch.exp(-x * x), absolute=8.0)
RULES[aten.erfc] = _unary(torch.erfc, lambda x, v: 2.0 / math.sqrt(math.pi) * torch.exp(-x * x), absolute=8.0)
RULES[aten.erfinv] = _unary(torch.erfinv, lambda x, v: math.sqrt(math.pi) / 2.0 * torch.exp(v * v))
RULES[aten.reciprocal] = _unary(torch.reciprocal, lambda x, v: v * v, own=1.0, arg_round=False, pole=0.0)
RULES[aten.rsqrt] = _unary(torch.rsqrt, lambda x, v: 0.5 * v / x, own=2.0, arg_round=False)


@rule(aten.sqrt)
def _sqrt(func, args, kwargs):
    x, e, i = _parts(args[0])
    v = torch.sqrt(x)
    pos = v > 0
    slope = torch.where(pos, 0.5 / torch.where(pos, v, torch.ones_like(v)), torch.zeros_like(v))
    # beyond first order: sqrt bends at x - d < 0 (a variance known to within more than itself):
    # the change over [max(x - d, 0), x + d], at most twice the slope's
    if _any_error(e, i):
        slope = slope * _interval_factor(lambda y: torch.sqrt(torch.clamp(y, min=0.0)), x, v, slope, _absolute(e, i))
    # at 0 a bound e on x gives sqrt(e u) on its root: in units of u, sqrt(e / u)
    ee = torch.where(pos, slope * e, torch.sqrt(e / U32))
    ii = torch.where(pos, slope * i, torch.zeros_like(i))
    return _result(v, ee, ii, 1.0)


@rule(aten.pow)
def _pow(func, args, kwargs):
    (av, ae, ai), (bv, be, bi), _ = _bin(args, kwargs)
    if not isinstance(args[0], torch.Tensor):  # scalar ** tensor
        base = float(av)
        v = torch.pow(base, bv)
        s = _finite((v * math.log(abs(base))).abs()) if base != 0 else torch.zeros_like(v)
        return _result(v, s * (be + _finite(bv.abs())), s * bi, 2.0)
    if isinstance(bv, (int, float)) and not isinstance(bv, bool):
        p = float(bv)
        v = torch.pow(av, p)
        if p == 2.0:
            s = 2.0 * _finite(av.abs())
            return _result(v, s * ae, s * ai, 1.0)
        if p == 1.0:
            return BoundTensor(v, ae.clone(), ai.clone())
        if p == 0.0:
            return exact(v)
        s = _finite((p * torch.pow(av, p - 1.0)).abs())
        integral = p == int(p) and abs(p) <= 4
        own = float(abs(p)) if integral else 2.0 + 0.0
        extra = 0.0 if integral else _finite((v * p * torch.log(av.abs())).abs())
        return _result(v, s * ae + extra, s * ai, own)
    v = torch.pow(av, bv)
    la = torch.log(av.abs())
    sa = _finite((bv * torch.pow(av, bv - 1.0)).abs())
    sb = _finite((v * la).abs())
    return _result(v, sa * ae + sb * be + _finite((v * bv * la).abs()), sa * ai + sb * bi, 2.0)


@rule(aten.square)
def _square(func, args, kwargs):
    return _pow(aten.pow.Tensor_Scalar, (args[0], 2), {})


# Continuous piecewise functions: a bound on the operands bounds the result.
@rule(aten.relu)
def _relu(func, args, kwargs):
    v, e, i = _parts(args[0])
    return BoundTensor(torch.relu(v), e.clone(), i.clone())


@rule(aten.clamp, aten.clamp_min, aten.clamp_max)
def _clamp(func, args, kwargs):
    v, e, i = _parts(args[0])
    lo = kwargs.get("min", args[1] if len(args) > 1 else None)
    hi = kwargs.get("max", args[2] if len(args) > 2 else None)
    if func.overloadpacket is aten.clamp_max:
        lo, hi = None, args[1]
    lo_v = _parts(lo)[0] if lo is not None else None
    hi_v = _parts(hi)[0] if hi is not None else None
    r = torch.clamp(v, min=lo_v, max=hi_v) if not any(isinstance(t, torch.Tensor) for t in (lo_v, hi_v)) else \
        torch.minimum(torch.maximum(v, lo_v) if lo_v is not None else v, hi_v) if hi_v is not None else torch.maximum(v, lo_v)
    bounds_e = [e] + [_parts(t)[1] for t in (lo, hi) if t is not None]
    bounds_i = [i] + [_parts(t)[2] for t in (lo, hi) if t is not None]
    ee = bounds_e[0]
    ii = bounds_i[0]
    for b in bounds_e[1:]:
        ee = torch.maximum(torch.as_tensor(ee, dtype=F64), torch.as_tensor(b, dtype=F64))
    for b in bounds_i[1:]:
        ii = torch.maximum(torch.as_tensor(ii, dtype=F64), torch.as_tensor(b, dtype=F64))
    return BoundTensor(r, torch.broadcast_to(ee, r.shape).contiguous(), torch.broadcast_to(ii, r.shape).contiguous())


@rule(aten.maximum, aten.minimum, aten.fmax, aten.fmin)
def _maxmin(func, args, kwargs):
    (av, ae, ai), (bv, be, bi), _ = _bin(args, kwargs)
    v = func(av, bv)
    e = torch.maximum(torch.as_tensor(ae, dtype=F64), torch.as_tensor(be, dtype=F64))
    i = torch.maximum(torch.as_tensor(ai, dtype=F64), torch.as_tensor(bi, dtype=F64))
    return BoundTensor(v, torch.broadcast_to(e, v.shape).contiguous(), torch.broadcast_to(i, v.shape).contiguous())


# Decisions: comparisons are uncertain where the operands are within their bounds of each other.
def _spread(ae, be, ai, bi):
    return U32 * (torch.as_tensor(ae, dtype=F64) + torch.as_tensor(be, dtype=F64)) + \
        _STATE.u_in * (torch.as_tensor(ai, dtype=F64) + torch.as_tensor(bi, dtype=F64))


@rule(aten.lt, aten.le, aten.gt, aten.ge, aten.eq, aten.ne)
def _compare(func, args, kwargs):
    (av, ae, ai), (bv, be, bi), _ = _bin(args, kwargs)
    v = func(av, bv)
    if not (isinstance(av, torch.Tensor) and av.is_floating_point()) and \
            not (isinstance(bv, torch.Tensor) and bv.is_floating_point()):
        unsure = torch.zeros(v.shape, dtype=torch.bool)
        for x in (args[0], args[1]):
            if isinstance(x, BoundTensor):
                unsure = unsure | torch.isinf(x.e)
        return _uncertain(v, torch.broadcast_to(unsure, v.shape))
    gap = torch.as_tensor(av - bv, dtype=F64).abs()
    unsure = gap <= _spread(ae, be, ai, bi)
    return _uncertain(v, torch.broadcast_to(unsure & torch.isfinite(gap), v.shape))


@rule(aten.logical_and, aten.logical_or, aten.logical_xor, aten.logical_not, aten.bitwise_and,
      aten.bitwise_or, aten.bitwise_not, aten.bitwise_xor)
def _logical(func, args, kwargs):
    vals = [_val(a) for a in args]
    v = func(*vals, **kwargs)
    unsure = torch.zeros(v.shape, dtype=torch.bool)
    for a in args:
        if isinstance(a, BoundTensor):
            unsure = unsure | torch.broadcast_to(torch.isinf(a.e), v.shape)
    return _uncertain(v, unsure)


@rule(aten.where)
def _where(func, args, kwargs):
    c = args[0]
    cv = c.v if isinstance(c, BoundTensor) else c
    if len(args) == 1:
        raise UnsupportedOpError("aten.where(condition) (nonzero): a data-dependent shape")
    (av, ae, ai), (bv, be, bi) = _parts(args[1]), _parts(args[2])
    v = torch.where(cv, torch.as_tensor(av, dtype=F64) if not isinstance(av, torch.Tensor) else av,
                    torch.as_tensor(bv, dtype=F64) if not isinstance(bv, torch.Tensor) else bv)
    ae_t, be_t = torch.as_tensor(ae, dtype=F64), torch.as_tensor(be, dtype=F64)
    ai_t, bi_t = torch.as_tensor(ai, dtype=F64), torch.as_tensor(bi, dtype=F64)
    e = torch.where(cv, ae_t, be_t)
    i = torch.where(cv, ai_t, bi_t)
    if isinstance(c, BoundTensor) and bool(torch.isinf(c.e).any()):
        unsure = torch.broadcast_to(torch.isinf(c.e), v.shape)
        either = _finite((torch.as_tensor(av, dtype=F64) - torch.as_tensor(bv, dtype=F64)).abs()) / U32
        e = torch.where(unsure, torch.maximum(ae_t, be_t) + either, e)
        i = torch.where(unsure, torch.maximum(ai_t, bi_t), i)
    return BoundTensor(v, torch.broadcast_to(e, v.shape).contiguous(), torch.broadcast_to(i, v.shape).contiguous())


@rule(aten.masked_fill)
def _masked_fill(func, args, kwargs):
    return _where(aten.where.self, (args[2] if False else args[1], args[2], args[0]), {}) if False else \
        _where(aten.where.self, (args[1], _fill_like(args[0], args[2]), args[0]), {})


def _fill_like(x, value):
    if isinstance(value, BoundTensor):
        return value
    val = _val(value)
    v = torch.as_tensor(val, dtype=F64 if _val(x).is_floating_point() else _val(x).dtype)
    return exact(v)


@rule(aten.floor, aten.ceil, aten.trunc, aten.round, aten.frac)
def _steps(func, args, kwargs):
    x, e, i = _parts(args[0])
    v = func(x, **kwargs)
    if func.overloadpacket is aten.round:
        d = (x - torch.floor(x) - 0.5).abs()
    else:
        f = x - torch.floor(x)
        d = torch.minimum(f, 1.0 - f)
    unsure = d <= _spread(e, 0.0, i, 0.0)
    if func.overloadpacket is aten.frac:  # continuous between steps: x's bound, 1 across one
        base = BoundTensor(v, e.clone(), i.clone())
        base.e = torch.where(unsure, torch.full_like(e, 1.0 / U32), e)
        return base
    return _step(v, unsure)


@rule(aten.sign)
def _sign(func, args, kwargs):
    x, e, i = _parts(args[0])
    unsure = x.abs() <= _spread(e, 0.0, i, 0.0)
    v = torch.sign(x)
    return BoundTensor(v, torch.where(unsure, torch.full_like(e, 1.0 / U32), torch.zeros_like(e)), _zeros(v))


# --- reductions ----------------------------------------------------------------------------------

def _dims(x: torch.Tensor, dim) -> List[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % max(x.dim(), 1) for d in dim})


def _reduced(x: torch.Tensor, args, kwargs) -> Tuple[List[int], bool]:
    """(the reduced dims, keepdim) of a reduction's call (self, dim=None, keepdim=False, ...)."""
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    keepdim = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
    return _dims(x, dim), keepdim


def _reduce_sum(v, e, i, dims, keepdim):
    s = v.sum(dim=dims, keepdim=keepdim) if dims else v.clone()
    g = sum_growth(v, dims) if dims else torch.zeros_like(v)
    if keepdim and dims:
        for d in dims:
            g = g.unsqueeze(d)
    tot = _finite(v.abs()).sum(dim=dims, keepdim=keepdim) if dims else _finite(v.abs())
    ee = (e.sum(dim=dims, keepdim=keepdim) if dims else e) + g * tot
    ii = i.sum(dim=dims, keepdim=keepdim) if dims else i
    return s, ee, ii


@rule(aten.sum)
def _sum(func, args, kwargs):
    x, e, i = _parts(args[0])
    if not x.is_floating_point():
        return _uncertain(torch.sum(x, *args[1:], **kwargs), torch.zeros((), dtype=torch.bool))
    dims, keepdim = _reduced(x, args, kwargs)
    s, ee, ii = _reduce_sum(x, e, i, dims, keepdim)
    return _result(s, ee, ii, 0.0)  # the growth holds the sum's own roundings


@rule(aten.mean)
def _mean(func, args, kwargs):
    x, e, i = _parts(args[0])
    dims, keepdim = _reduced(x, args, kwargs)
    n = 1
    for d in dims:
        n *= x.shape[d]
    s, ee, ii = _reduce_sum(x, e, i, dims, keepdim)
    return _result(s / max(n, 1), ee / max(n, 1), ii / max(n, 1), 1.0)


@rule(aten.prod)
def _prod(func, args, kwargs):
    x, e, i = _parts(args[0])
    dims, keepdim = _reduced(x, args, kwargs)
    v = x
    for d in sorted(dims, reverse=True):
        v = v.prod(d, keepdim=True)
    if not keepdim:
        for d in sorted(dims, reverse=True):
            v = v.squeeze(d)
    rel = (_finite(e / x.abs())).sum(dim=dims, keepdim=keepdim)
    reli = (_finite(i / x.abs())).sum(dim=dims, keepdim=keepdim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    return _result(v, _finite(v.abs()) * rel, _finite(v.abs()) * reli, float(n))


@rule(aten.amax, aten.amin)
def _amax(func, args, kwargs):
    x, e, i = _parts(args[0])
    dim = kwargs.get("dim", args[1] if len(args) > 1 else [])
    keepdim = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
    dims = _dims(x, dim)
    v = func(x, dims, keepdim)
    # the max of values each within its bound is within the largest bound of the true max
    return BoundTensor(v, torch.amax(e, dims, keepdim), torch.amax(i, dims, keepdim))


def _top_gap(x, e, i, dim, largest=True):
    """Whether the best value along `dim` may be another element: the runner-up within bounds."""
    if x.shape[dim] < 2:
        return torch.zeros(x.select(dim, 0).shape, dtype=torch.bool)
    vals, idx = torch.topk(x, 2, dim=dim, largest=largest)
    b = U32 * torch.gather(e, dim, idx) + _STATE.u_in * torch.gather(i, dim, idx)
    gap = (vals.select(dim, 0) - vals.select(dim, 1)).abs()
    return gap <= b.select(dim, 0) + b.select(dim, 1)


@rule(aten.max, aten.min)
def _max(func, args, kwargs):
    x, e, i = _parts(args[0])
    if len(args) == 1 and not kwargs:
        return BoundTensor(func(x), e.max(), i.max())
    if isinstance(args[1], (torch.Tensor, BoundTensor)):  # elementwise maximum
        return _maxmin(aten.maximum.default, args, kwargs)
    dim = args[1] % max(x.dim(), 1)
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    v, idx = func(x, dim, keepdim)
    unsure = _top_gap(x, e, i, dim, func.overloadpacket is aten.max)
    if keepdim:
        unsure = unsure.unsqueeze(dim)
    return (BoundTensor(v, torch.amax(e, dim, keepdim), torch.amax(i, dim, keepdim)), _uncertain(idx, unsure))


@rule(aten.argmax, aten.argmin)
def _argmax(func, args, kwargs):
    x, e, i = _parts(args[0])
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    keepdim = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
    idx = func(x, dim, keepdim)
    if dim is None:
        unsure = _top_gap(x.reshape(-1), e.reshape(-1), i.reshape(-1), 0, func.overloadpacket is aten.argmax)
    else:
        unsure = _top_gap(x, e, i, dim % x.dim(), func.overloadpacket is aten.argmax)
        if keepdim:
            unsure = unsure.unsqueeze(dim % x.dim())
    return _uncertain(idx, torch.broadcast_to(unsure, idx.shape))


@rule(aten.cumsum)
def _cumsum(func, args, kwargs):
    x, e, i = _parts(args[0])
    dim = (kwargs.get("dim", args[1] if len(args) > 1 else 0)) % max(x.dim(), 1)
    v = torch.cumsum(x, dim)
    g = sum_growth(x, [dim]).unsqueeze(dim) if x.dim() else sum_growth(x.reshape(1), [0])
    run = torch.cumsum(_finite(x.abs()), dim)
    return _result(v, torch.cumsum(e, dim) + g * run, torch.cumsum(i, dim), 0.0)


@rule(aten.sort)
def _sort(func, args, kwargs):
    x, e, i = _parts(args[0])
    dim = kwargs.get("dim", args[1] if len(args) > 1 else -1)
    desc = bool(kwargs.get("descending", args[2] if len(args) > 2 else False))
    v, idx = torch.sort(x, dim=dim, descending=desc)
    d = dim % x.dim()
    emax, imax = torch.amax(e, d, keepdim=True), torch.amax(i, d, keepdim=True)
    gap = (v.narrow(d, 1, max(v.shape[d] - 1, 0)) - v.narrow(d, 0, max(v.shape[d] - 1, 0))).abs()
    close = gap <= 2 * (U32 * emax + _STATE.u_in * imax)
    unsure = torch.zeros(v.shape, dtype=torch.bool)
    if v.shape[d] > 1:
        unsure.narrow(d, 1, v.shape[d] - 1).copy_(close)
        unsure.narrow(d, 0, v.shape[d] - 1).logical_or_(close)
    return (BoundTensor(v, torch.broadcast_to(emax, v.shape).contiguous(), torch.broadcast_to(imax, v.shape).contiguous()),
            _uncertain(idx, unsure))


@rule(aten.topk)
def _topk(func, args, kwargs):
    x, e, i = _parts(args[0])
    k = args[1]
    dim = kwargs.get("dim", args[2] if len(args) > 2 else -1)
    largest = bool(kwargs.get("largest", args[3] if len(args) > 3 else True))
    v, idx = torch.topk(x, k, dim=dim, largest=largest)
    d = dim % x.dim()
    sv, _ = _sort(aten.sort.default, (BoundTensor(x, e, i), d, largest), {})
    _, sidx = _sort(aten.sort.default, (BoundTensor(x, e, i), d, largest), {})
    return (BoundTensor(v, sv.e.narrow(d, 0, k).contiguous(), sv.i.narrow(d, 0, k).contiguous()),
            _uncertain(idx, torch.isinf(sidx.e.narrow(d, 0, k))))


# --- GEMMs and convolutions ----------------------------------------------------------------------

def _gemm_growth(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """sqrt(K), or more where an output's K products are near-equal (a constant row times a
    constant column: a running sum's roundings add one-signed). The products' spread is bounded
    from below by the row's and the column's ranges (the hand-written GEMMs' rule)."""
    aa, ab = a.abs(), b.abs()
    mean = (aa @ ab) / max(k, 1)
    ra = (aa.amax(-1) - aa.amin(-1)).unsqueeze(-1)   # [.., M, 1]
    ma = aa.amin(-1).unsqueeze(-1)
    rb = (ab.amax(-2) - ab.amin(-2)).unsqueeze(-2)   # [.., 1, N]
    mb = ab.amin(-2).unsqueeze(-2)
    spread = torch.maximum(ra * mb, rb * ma)
    from ._growth import near_equal_growth
    return near_equal_growth(float(k), mean, spread)


def _mm_core(a, ae, ai, b, be, bi):
    v = a @ b
    k = a.shape[-1]
    aa, ab = _finite(a.abs()), _finite(b.abs())
    mag = aa @ ab
    g = _gemm_growth(_finite(a), _finite(b), k) if k > 0 else torch.zeros_like(mag)
    e = aa @ be + ae @ ab + g * mag
    i = aa @ bi + ai @ ab
    return v, e, i


@rule(aten.mm, aten.bmm, aten.matmul)
def _mm(func, args, kwargs):
    (a, ae, ai), (b, be, bi) = _parts(args[0]), _parts(args[1])
    if a.dim() == 1 or b.dim() == 1:
        raise UnsupportedOpError("aten.matmul of a vector: decomposed before it reaches here")
    v, e, i = _mm_core(a, ae, ai, b, be, bi)
    return _result(v, e, i, 0.0)


@rule(aten.addmm, aten.baddbmm)
def _addmm(func, args, kwargs):
    (c, ce, ci), (a, ae, ai), (b, be, bi) = _parts(args[0]), _parts(args[1]), _parts(args[2])
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    v, e, i = _mm_core(a, ae, ai, b, be, bi)
    out = alpha * v + beta * c
    return _result(out, abs(alpha) * e + abs(beta) * ce + (0.0 if alpha == 1 else _finite(v.abs())),
                   abs(alpha) * i + abs(beta) * ci, 1.0)


@rule(aten.mv, aten.dot, aten.addmv)
def _mv(func, args, kwargs):
    if func.overloadpacket is aten.addmv:
        c = args[0]
        prod = _mv(aten.mv.default, (args[1], args[2]), {})
        return _add(aten.add.Tensor, (prod, c), {})
    (a, ae, ai), (b, be, bi) = _parts(args[0]), _parts(args[1])
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    v, e, i = _mm_core(a2, ae.reshape(a2.shape), ai.reshape(a2.shape), b.unsqueeze(-1), be.unsqueeze(-1), bi.unsqueeze(-1))
    shape = torch.Size([]) if func.overloadpacket is aten.dot else v.shape[:-1]
    return _result(v.reshape(shape), e.reshape(shape), i.reshape(shape), 0.0)


@rule(aten.convolution)
def _conv(func, args, kwargs):
    (x, xe, xi), (w, we, wi) = _parts(args[0]), _parts(args[1])
    bias = args[2]
    rest = list(args[3:])
    conv = lambda a, b: aten.convolution.default(a, b, None, *rest)  # noqa: E731
    v = conv(x, w)
    ax, aw = _finite(x.abs()), _finite(w.abs())
    mag = conv(ax, aw)
    groups = rest[-1]
    k = (w.shape[1] if not rest[3] else w.shape[0] // groups) * int(torch.tensor(w.shape[2:]).prod()) if w.dim() > 2 else w.shape[1]
    e = conv(xe, aw) + conv(ax, we) + math.sqrt(max(k, 1)) * mag
    i = conv(xi, aw) + conv(ax, wi)
    if bias is not None:
        bv, be, bi = _parts(bias)
        shape = [1, -1] + [1] * (v.dim() - 2)
        v = v + bv.reshape(shape)
        e = e + be.reshape(shape)
        i = i + bi.reshape(shape)
        return _result(v, e, i, 1.0)
    return _result(v, e, i, 0.0)


# Pooling: an average is a sum over a window (its growth sqrt(window)); a max picks a value.
@rule(aten.avg_pool1d, aten.avg_pool2d, aten.avg_pool3d, aten._adaptive_avg_pool2d, aten.adaptive_avg_pool1d,
      aten._adaptive_avg_pool3d)
def _avg_pool(func, args, kwargs):
    x, e, i = _parts(args[0])
    v = func(x, *args[1:], **kwargs)
    window = max(1.0, float(x[..., :].numel()) / max(v.numel(), 1)) if "adaptive" in str(func) else None
    if window is None:
        ks = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
        window = float(torch.tensor(list(ks) * (1 if len(ks) > 1 else x.dim() - 2)).prod())
    mag = func(_finite(x.abs()), *args[1:], **kwargs)
    return _result(v, func(e, *args[1:], **kwargs) + math.sqrt(window) * mag, func(i, *args[1:], **kwargs), 1.0)


@rule(aten.max_pool1d, aten.max_pool2d, aten.max_pool3d, aten.max_pool2d_with_indices,
      aten.max_pool3d_with_indices, aten.adaptive_max_pool2d, aten.adaptive_max_pool1d)
def _max_pool(func, args, kwargs):
    x, e, i = _parts(args[0])
    out = func(x, *args[1:], **kwargs)
    emax = func(e, *args[1:], **kwargs)
    imax = func(i, *args[1:], **kwargs)
    if isinstance(out, tuple):
        # the max's value is within the window's largest bound (a bound taken as a max-pool of
        # the bounds is the largest one in each window)
        return (BoundTensor(out[0], emax[0].contiguous(), imax[0].contiguous()),
                _uncertain(out[1], torch.zeros(out[1].shape, dtype=torch.bool)))
    return BoundTensor(out, emax.contiguous(), imax.contiguous())


# --- dtype conversions and factories -------------------------------------------------------------

@rule(aten._to_copy)
def _to_copy(func, args, kwargs):
    x = args[0]
    v, e, i = _parts(x)
    dtype = kwargs.get("dtype", None)
    kw = {k: w for k, w in kwargs.items() if k not in ("dtype", "device", "layout", "pin_memory", "memory_format")}
    if dtype is None or (dtype.is_floating_point and v.is_floating_point()):
        # stays float64 here; a cast to a narrower dtype than float32 rounds in the kernel too
        nominal = dtype or (x.dtype if isinstance(x, torch.Tensor) else torch.float32)
        extra = 0.0
        if dtype is not None and _UNIT.get(dtype, 0.0) > U32:
            extra = _finite(v.abs()) * (_UNIT[dtype] / U32)
        return BoundTensor(v.clone(), (e + extra).contiguous() if isinstance(extra, torch.Tensor) else e.clone(),
                           i.clone(), nominal)
    if dtype.is_floating_point:  # integer/bool to float: exact below 2^24, uncertain stays 'either'
        r = v.to(F64)
        unsure = torch.isinf(e) if isinstance(e, torch.Tensor) else torch.zeros(r.shape, dtype=torch.bool)
        return BoundTensor(r, torch.where(unsure, torch.full_like(r, 1.0 / U32), torch.zeros_like(r)), _zeros(r),
                           dtype)
    r = v.to(dtype, **kw)
    if v.is_floating_point():
        f = v - torch.trunc(v)
        d = torch.minimum(f.abs(), 1.0 - f.abs())
        if dtype == torch.bool:
            d = v.abs()
        return _uncertain(r, d <= _spread(e, 0.0, i, 0.0))
    return _uncertain(r, torch.isinf(e) if isinstance(e, torch.Tensor) else torch.zeros(r.shape, dtype=torch.bool))


@rule(aten.to)
def _to(func, args, kwargs):
    dtype = kwargs.get("dtype")
    for a in args[1:]:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, torch.Tensor):
            dtype = a.dtype
    x = args[0]
    if dtype is None or dtype == x.dtype:
        return x
    return _to_copy(aten._to_copy.default, (x,), {"dtype": dtype})


_RANDOM = {aten.rand, aten.randn, aten.randint, aten.randperm, aten.bernoulli, aten.normal, aten.uniform_,
           aten.normal_, aten.bernoulli_, aten.multinomial, aten.rand_like, aten.randn_like, aten.randint_like,
           aten.exponential_, aten.geometric_, aten.cauchy_, aten.log_normal_, aten.random_}


@rule(aten.native_dropout)
def _dropout(func, args, kwargs):
    p, train = args[1], args[2]
    if train and p > 0:
        raise UnsupportedOpError("dropout in training mode: the reference must be deterministic (put the module in "
                                 "eval mode)")
    x = args[0]
    v, e, i = _parts(x)
    return BoundTensor(v.clone(), e.clone(), i.clone()), exact(torch.ones(v.shape, dtype=torch.bool))


# --- structural ops: applied to the value and to each bound alike --------------------------------

_STRUCTURAL = {
    aten.view, aten._unsafe_view, aten.reshape, aten.expand, aten.permute, aten.transpose, aten.t, aten.squeeze,
    aten.unsqueeze, aten.slice, aten.select, aten.narrow, aten.clone, aten.contiguous, aten.cat, aten.stack,
    aten.split, aten.split_with_sizes, aten.chunk, aten.unbind, aten.flip, aten.roll, aten.repeat, aten.diagonal,
    aten.detach, aten.alias, aten.lift_fresh, aten.lift_fresh_copy, aten.tril, aten.triu, aten.movedim,
    aten.flatten, aten.unflatten, aten.expand_as, aten.view_as, aten.reshape_as, aten.unfold, aten.as_strided,
    aten.pixel_shuffle, aten.pixel_unshuffle, aten.channel_shuffle, aten.repeat_interleave, aten.tile,
    aten.index_select, aten.gather, aten.take_along_dim, aten.index, aten.upsample_nearest1d,
    aten.upsample_nearest2d, aten.upsample_nearest3d, aten.constant_pad_nd, aten.diag_embed,
    aten.new_empty, aten.empty_like, aten._reshape_alias, aten.dsplit, aten.hsplit, aten.vsplit, aten.swapaxes,
    aten.squeeze_copy, aten.view_copy, aten.permute_copy, aten.expand_copy, aten.transpose_copy,
    aten.select_scatter, aten.slice_scatter, aten.embedding, aten.masked_select, aten.broadcast_to,
    aten.index_put,
}


def _is_tensorish(x) -> bool:
    return isinstance(x, torch.Tensor)


def _structural(func, args, kwargs):
    """Applies ``func`` to the values, then to each bound with every value operand replaced by its
    bound (integer operands, indices, stay as they are). Indices that may be others make the
    elements they pick unresolvable."""
    flat, spec = tree_flatten((args, kwargs))
    floats = [isinstance(a, torch.Tensor) and (a.is_floating_point() if not isinstance(a, BoundTensor) else a.v.is_floating_point())
              for a in flat]

    def pick(which):
        out = []
        for a, fl in zip(flat, floats):
            if isinstance(a, BoundTensor):
                out.append(a.v if which == "v" else (getattr(a, which) if fl else a.v))
            elif isinstance(a, torch.Tensor) and fl:
                out.append(a.to(F64) if which == "v" else torch.zeros(a.shape, dtype=F64))
            else:
                out.append(a)
        return tree_unflatten(out, spec)

    a_v, k_v = pick("v")
    v = func(*a_v, **k_v)
    if func.overloadpacket is aten.constant_pad_nd:
        a_e = list(pick("e")[0]); a_i = list(pick("i")[0])
        if len(a_e) > 2:
            a_e[2] = 0.0
            a_i[2] = 0.0
        e = func(*a_e)
        i = func(*a_i)
    else:
        a_e, k_e = pick("e")
        a_i, k_i = pick("i")
        e = func(*a_e, **k_e)
        i = func(*a_i, **k_i)
    # indices of uncertain value: the elements they select are unresolvable
    idx_unsure = None
    for a in flat:
        if isinstance(a, BoundTensor) and not a.v.is_floating_point() and bool(torch.isinf(a.e).any()):
            idx_unsure = a
    vs, vspec = tree_flatten(v)
    es, _ = tree_flatten(e)
    is_, _ = tree_flatten(i)
    out = []
    for vv, ee, ii in zip(vs, es, is_):
        if not isinstance(vv, torch.Tensor):
            out.append(vv)
            continue
        if idx_unsure is not None and vv.is_floating_point():
            ee = torch.full(vv.shape, INF, dtype=F64) if ee.shape != vv.shape else torch.full_like(ee, INF)
        if not vv.is_floating_point():
            ee = torch.zeros(vv.shape, dtype=F64) if not isinstance(ee, torch.Tensor) or ee.dtype != F64 else ee
            ii = torch.zeros(vv.shape, dtype=F64)
        elif vv.dtype != F64:
            raise UnsupportedOpError(f"{func.overloadpacket} changed a value's dtype to {vv.dtype}: no rule for it")
        out.append(BoundTensor(vv, ee, ii))
    return tree_unflatten(out, vspec)


# Ops after which an input's values no longer reach the next op as themselves (its recipe is then
# decided before them): GEMMs and convolutions.
_MIXING = {aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.matmul, aten.mv, aten.dot, aten.addmv,
           aten.convolution}

_FACTORY_LIKE = {aten.zeros_like, aten.ones_like, aten.full_like, aten.new_zeros, aten.new_ones, aten.new_full,
                 aten.scalar_tensor, aten.zeros, aten.ones, aten.full, aten.arange, aten.linspace, aten.eye,
                 aten.empty, aten.new_tensor, aten.tensor, aten.empty_strided, aten.fill, aten.logspace}


def _factory(func, args, kwargs):
    kwargs = dict(kwargs)
    dt = kwargs.get("dtype")
    like = next((a for a in args if isinstance(a, BoundTensor)), None)
    if dt is None and like is not None:
        dt = like.v.dtype
    nominal = dt
    if dt is not None and dt.is_floating_point:
        kwargs["dtype"] = F64
    vals = [a.v if isinstance(a, BoundTensor) else a for a in args]
    v = func(*vals, **kwargs)
    if v.is_floating_point() and nominal is None:
        nominal = torch.get_default_dtype()
    return exact(v, nominal if v.is_floating_point() else None)


@rule(aten.nll_loss_forward)
def _nll_loss(func, args, kwargs):
    """nll_loss over log-probabilities (what cross_entropy calls): PyTorch 1.13's decomposition gathers
    at a negative ignore_index (-100, the default) and fails; this one masks first."""
    b = _bind(func, args, kwargs)
    x, target, weight = b["self"], b["target"], b.get("weight")
    reduction, ignore = int(b["reduction"]), int(b["ignore_index"])
    tv = target.v if isinstance(target, BoundTensor) else target
    cdim = 1 if x.dim() > 1 else 0
    keep = tv != ignore
    safe = torch.where(keep, tv, torch.zeros_like(tv))
    picked = torch.gather(x, cdim, safe.unsqueeze(cdim)).squeeze(cdim)
    if weight is not None:
        w = weight.unsqueeze(0).expand(x.shape) if x.dim() > 1 else weight
        wt = torch.gather(w, cdim, safe.unsqueeze(cdim)).squeeze(cdim)
        picked = picked * wt
        wsum = torch.where(keep, wt, torch.zeros_like(wt)).sum()
    else:
        wsum = keep.sum().to(x.dtype)
    result = torch.where(keep, -picked, torch.zeros_like(picked))
    if reduction == 0:  # none
        return result, x.new_full((), 0.0)
    total = result.sum()
    if reduction == 1:  # mean
        total = total / wsum
    return total, wsum


# --- prims: what PyTorch's decompositions (torch._refs) are written in ---------------------------

prims = _Namespace("prims")


@rule(prims.convert_element_type)
def _prims_convert(func, args, kwargs):
    return _to_copy(aten._to_copy.default, (args[0],), {"dtype": args[1]})


@rule(prims.sum)
def _prims_sum(func, args, kwargs):
    x, e, i = _parts(args[0])
    dims = _dims(x, list(args[1]) if args[1] is not None else None)
    if not x.is_floating_point():
        return _uncertain(x.sum(dims) if dims else x.clone(), torch.zeros((), dtype=torch.bool))
    s, ee, ii = _reduce_sum(x, e, i, dims, False)
    return _result(s, ee, ii, 0.0)


@rule(prims.var)
def _prims_var(func, args, kwargs):
    """The variance over ``dims`` with ``correction``, as a correct fp32 kernel computes it (two
    passes, or Welford): the mean's error enters each deviation, the squares' sum grows as a sum."""
    x, e, i = _parts(args[0])
    dims = _dims(x, list(args[1]) if args[1] is not None else None)
    correction = kwargs.get("correction", args[2] if len(args) > 2 else 1)
    n = 1
    for d in dims:
        n *= x.shape[d]
    mu = x.mean(dims, keepdim=True)
    d = x - mu
    sq = d * d
    denom = max(n - correction, 0)
    v = sq.sum(dims) / denom if denom > 0 else torch.full(sq.sum(dims).shape, float("nan"), dtype=F64)
    gx = sum_growth(x, dims)
    mu_e = (e.sum(dims, keepdim=True) + _keep(gx, dims) * _finite(x.abs()).sum(dims, keepdim=True)) / max(n, 1)
    mu_i = i.sum(dims, keepdim=True) / max(n, 1)
    # Each deviation carries its element's own error and its subtraction's rounding. The mean's
    # error delta does not enter them to first order: for any computed mean mu + delta,
    # sum (x - mu - delta)^2 = sum (x - mu)^2 + N delta^2 exactly (the deviations sum to 0), so a
    # mean off by delta gives var + delta^2, second order while delta << sigma and the whole error
    # where a running sum over repeats makes delta reach sigma (the catalogue's norm model).
    de = e + _finite(d.abs())
    gs = sum_growth(sq, dims)
    first = (2.0 * _finite(d.abs()) * de).sum(dims)
    delta = (U32 * mu_e + _STATE.u_in * mu_i).reshape(first.shape)  # absolute
    ee = first + gs * _finite(sq).sum(dims) + n * delta ** 2 / U32
    ii = (2.0 * _finite(d.abs()) * i).sum(dims)
    if denom > 0:
        ee, ii = ee / denom, ii / denom
    # Welford's running mean (PyTorch's CPU var, Apex's) errs by up to 2 u range max|x| in the
    # variance (the catalogue's layer_norm model, engine/ops/norm_ops.cpp)
    rng = (x.amax(dims) - x.amin(dims)) if dims else torch.zeros_like(v)
    ee = ee + 2.0 * _finite(rng.abs() * x.abs().amax(dims) if dims else rng)
    return _result(v, ee, ii, 1.0)


def _bind(func, args, kwargs) -> Dict[str, Any]:
    """The call's arguments by their names in the op's schema (defaults filled in)."""
    out: Dict[str, Any] = {}
    for k, a in enumerate(func._schema.arguments):
        if k < len(args):
            out[a.name] = args[k]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


@rule(aten.var, aten.var_mean, aten.std, aten.std_mean)
def _var(func, args, kwargs):
    """aten's variance and standard deviation (any overload): the prims rule over the dims, then a
    square root for std; var_mean and std_mean return the mean too."""
    b = _bind(func, args, kwargs)
    x = b["self"]
    xv = x.v if isinstance(x, BoundTensor) else x
    dim = b.get("dim")
    correction = b.get("correction")
    if correction is None:
        correction = 1 if b.get("unbiased", True) in (True, None) else 0
    keepdim = bool(b.get("keepdim", False))
    dims = _dims(xv, dim)
    var = _prims_var(prims.var.default, (x, dims, correction), {})
    packet = func.overloadpacket
    out = var
    if packet in (aten.std, aten.std_mean):
        out = _sqrt(aten.sqrt.default, (var,), {})
    if keepdim:
        out = _structural(aten.view.default, (out, list(_keep(torch.empty(out.shape), dims).shape)), {})
    if packet in (aten.var_mean, aten.std_mean):
        mean = _mean(aten.mean.dim, (x, dims, keepdim), {})
        return out, mean
    return out


def _keep(t, dims):
    for d in dims:
        t = t.unsqueeze(d)
    return t


@rule(prims.amax, prims.amin)
def _prims_amax(func, args, kwargs):
    op = aten.amax.default if func.overloadpacket is prims.amax else aten.amin.default
    return _amax(op, (args[0], list(args[1]) if args[1] is not None else [], False), {})


@rule(prims.broadcast_in_dim)
def _prims_broadcast(func, args, kwargs):
    return _structural(func, args, kwargs)


@rule(prims.where)
def _prims_where(func, args, kwargs):
    return _where(aten.where.self, args, kwargs)


@rule(prims.prod)
def _prims_prod(func, args, kwargs):
    return _prod(aten.prod.dim_int, (args[0], list(args[1])[0] if len(list(args[1])) == 1 else None), {})


_PRIMS_STRUCTURAL = {prims.squeeze, prims.transpose, prims.view_of, prims.reshape, prims.collapse_view,
                     prims.split_dim, prims.slice, prims.slice_in_dim, prims.rev, prims.cat, prims.as_strided}
_PRIMS_ALIAS = {"div": aten.div, "pow": aten.pow, "fmax": aten.fmax, "fmin": aten.fmin, "erf_inv": aten.erfinv}


def _prims_rule(packet):
    """The aten rule of a prims elementwise op of the same name (prims.add -> aten.add)."""
    name = str(packet).split(".", 1)[-1]
    target = _PRIMS_ALIAS.get(name) or getattr(aten, name)
    return RULES.get(target)


# --- the dispatcher ------------------------------------------------------------------------------

_MUTATING_VIEWLESS = {aten.copy_, aten.fill_, aten.zero_}


def _is_view(func) -> bool:
    rets = func._schema.returns
    return len(rets) > 0 and rets[0].alias_info is not None and not rets[0].alias_info.is_write


def _inplace_base(func):
    name = func._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    base = getattr(aten, name[:-1], None)
    if base is None:
        return None
    return getattr(base, func._overloadname, None) or getattr(base, "default", None)


def _assign(dst, res):
    if isinstance(dst, BoundTensor):
        dst.v.copy_(res.v if isinstance(res, BoundTensor) else res)
        if isinstance(res, BoundTensor):
            dst.e.copy_(torch.broadcast_to(res.e, dst.e.shape))
            dst.i.copy_(torch.broadcast_to(res.i, dst.i.shape))
        else:
            dst.e.zero_()
            dst.i.zero_()
        return dst
    # a write into the reference's own state (BatchNorm's running statistics in training mode): the
    # copy evaluated here keeps its state, and no output of this call reads it
    return dst


def _nominal(args, kwargs) -> Optional[torch.dtype]:
    """The floating dtype PyTorch gives a result of these operands: the promotion of the floating
    tensors' (nominal) dtypes."""
    out = None
    for a in tree_flatten((args, kwargs))[0]:
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point:
            out = a.dtype if out is None else torch.promote_types(out, a.dtype)
    return out


def _dispatch(func, args, kwargs):
    packet = func.overloadpacket
    if _STATE.ops is not None:
        _STATE.ops.add(str(packet))
    if packet in _RANDOM:
        raise UnsupportedOpError(f"the reference draws random numbers ({packet}): a reference must be "
                                 "deterministic")
    _STATE.depth += 1
    srcs: Dict[str, bool] = {}
    if _STATE.consumers is not None and _STATE.depth == 1:
        # which inputs this user-level op reads, and whether through a GEMM or a convolution
        for a in tree_flatten((args, kwargs))[0]:
            for src, mixed in (getattr(a, "_srcs", None) or {}).items():
                srcs[src] = srcs.get(src, True) and mixed
        for src, mixed in srcs.items():
            _STATE.consumers.setdefault(src, set()).add((str(packet), mixed))
    saved = _STATE.nominal
    _STATE.nominal = _nominal(args, kwargs) or saved
    try:
        out = _dispatch_inner(func, packet, args, kwargs)
        if srcs:
            mixing = packet in _MIXING
            for t in tree_flatten(out)[0]:
                if isinstance(t, BoundTensor):
                    t._srcs = {src: mixed or mixing for src, mixed in srcs.items()}
        return out
    finally:
        _STATE.depth -= 1
        _STATE.nominal = saved


def _dispatch_inner(func, packet, args, kwargs):
    if True:
        if packet is aten.copy_:
            return _assign(args[0], args[1])
        if packet in (aten.fill_, aten.zero_):
            val = args[1] if len(args) > 1 else 0.0
            return _assign(args[0], _fill_like(args[0], val))
        base = _inplace_base(func)
        if base is not None and packet not in RULES:
            res = _dispatch(base, args, kwargs)
            return _assign(args[0], res)
        r = RULES.get(packet)
        if r is None and str(packet).startswith("prims."):
            if packet in _PRIMS_STRUCTURAL:
                return _structural(func, args, kwargs)
            r = _prims_rule(packet)
        if r is not None:
            return r(func, args, kwargs)
        if packet in _FACTORY_LIKE:
            return _factory(func, args, kwargs)
        if packet in _STRUCTURAL or _is_view(func):
            return _structural(func, args, kwargs)
        d = decomposition_table.get(func)
        if d is not None:
            _STATE.depth += 1  # the decomposition's ops are not user-level
            try:
                return d(*args, **kwargs)
            finally:
                _STATE.depth -= 1
        if packet in (aten.sym_size, aten.sym_stride, aten.sym_numel, aten.is_same_size, aten._local_scalar_dense,
                      aten.is_nonzero, aten.equal, aten.item, aten.numel, aten.size, aten.stride):
            return func(*tree_map(_val, args), **tree_map(_val, kwargs))
        raise UnsupportedOpError(f"{packet} has no error rule (and no decomposition into ops that have one): the "
                                 "automatic condition term cannot be derived for this reference")


class _Float64Mode(TorchDispatchMode):
    """While the reference runs: plain floating tensors (parameters, constants made in forward) enter
    as exact float64 BoundTensors, and floating factories make float64."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in _FACTORY_LIKE and not any(isinstance(a, BoundTensor) for a in tree_flatten((args, kwargs))[0]):
            return _factory(func, args, kwargs)
        if packet in _RANDOM:
            raise UnsupportedOpError(f"the reference draws random numbers ({packet}): a reference must be "
                                     "deterministic")

        def lift(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, BoundTensor):
                return exact(x)
            return x
        return _dispatch(func, tree_map(lift, args), tree_map(lift, kwargs))


def evaluate(fn: Callable, args: Sequence[Any], kwargs: Optional[Dict[str, Any]] = None,
             case_dtype: torch.dtype = torch.float32, trace: Optional[set] = None,
             names: Optional[Sequence[str]] = None, consumers: Optional[Dict[str, set]] = None,
             boundaries: bool = True):
    """Runs ``fn(*args, **kwargs)`` in float64 with the bounds. ``args``: floating tensors hold the
    exact case values (any dtype; they enter as float64), integer tensors their indices. Returns the
    outputs (a tensor or a tuple, as fn returns them) as BoundTensors; ``trace``, when given, gathers
    the aten ops the reference called, and ``consumers`` (with the args' ``names``) the user-level
    ops that read each input; ``boundaries=False``: no user-level op's result is rounded to the
    case dtype (c_in stays 0: a fused kernel's intermediates are fp32)."""
    _STATE.u_in = _UNIT.get(case_dtype, U32)
    _STATE.boundaries = boundaries
    _STATE.ops = trace
    _STATE.consumers = consumers
    _STATE.depth = 0
    _STATE.nominal = None

    def wrap(x, name=None):
        if not isinstance(x, torch.Tensor):
            return x
        b = exact(x)
        if name is not None:
            b._srcs = {name: False}
        return b
    names = list(names) if names is not None else [None] * len(args)
    wrapped_args = tuple(wrap(a, n) for a, n in zip(args, names + [None] * (len(args) - len(names))))
    wrapped_kwargs = {k: wrap(v, k) for k, v in (kwargs or {}).items()}
    try:
        with torch.no_grad(), _Float64Mode():
            out = fn(*wrapped_args, **wrapped_kwargs)
    finally:
        _STATE.ops = None
        _STATE.consumers = None
        _STATE.depth = 0
    return tree_map(_without_final_rounding, out)


def _without_final_rounding(o: Any) -> Any:
    """An output's c_in less its own last rounding to the case dtype: the verdict's u_out |ref|
    already holds that one (PyTorch's last op stores the result once, as the kernel does)."""
    if isinstance(o, BoundTensor) and o.v.is_floating_point() and _UNIT.get(o.dtype, 0.0) > U32:
        o.i = torch.clamp(o.i - _finite(o.v.abs()) * (_UNIT[o.dtype] / _STATE.u_in), min=0.0)
    return o
