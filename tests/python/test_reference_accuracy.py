"""gpuemu.reference against an independent float64 computation, for every op in the catalogue.

Each op's reference (the C++ oracle, through ``gpuemu.reference``) is compared with PyTorch float64
on CPU (``torch.nn.functional`` where it has the op, a few lines of torch float64 from the schema's
documented semantics where it has not: rms_norm, attention, rope, the fp8 ops) on random inputs
that are exact in float64 (float32, float16 or bfloat16 values), at a small shape and at odd,
partial-tile shapes.

The criterion, per element: ``|got - want| <= 1e-12 * (|want| + scale)``. ``scale`` is 0 for ops
whose result is a well-conditioned function of each input (plain relative error); where the exact
result is a sum or difference of larger terms it is the magnitude of those terms (for a dot product
``|a|@|b|``, for a sum ``sum|x|``, for a scan the running ``sum|x|``): two fp64 computations that
sum in a different order legitimately differ by a few ulp of that magnitude, not of the (possibly
cancelled, tiny) result. Each op's scale is written next to it. Exact ops (relu, amax, argmax,
embedding, ...) are compared bit for bit.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest

import gpuemu

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL = 1e-12
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas" / "ops"


# ---- helpers ----


def t64(x) -> "torch.Tensor":
    """x as a float64 torch tensor (exact: every input here is float32/float16/bfloat16)."""
    if isinstance(x, torch.Tensor):
        return x.detach().double()
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def np64(t) -> np.ndarray:
    return t.detach().double().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, np.float64)


def assert_close(got, want, scale=None, rtol: float = RTOL, what: str = "") -> None:
    """|got - want| <= rtol * (|want| + scale) elementwise; NaN and +-Inf must match exactly."""
    got = np.asarray(got)
    want = np64(want)
    assert got.dtype == np.float64, f"{what}: reference returned {got.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    s = 0.0 if scale is None else np.broadcast_to(np64(scale), want.shape)[finite]
    err = np.abs(got[finite] - want[finite])
    # + 1e-300: below float64's normal range the result is only known to its subnormal spacing
    bound = rtol * (np.abs(want[finite]) + s) + 1e-300
    if err.size:
        ratio = err / bound
        worst = int(np.argmax(ratio))
        assert (err <= bound).all(), (
            f"{what}: max err/bound {ratio[worst]:.3g} at flat index {worst}: "
            f"got {got[finite][worst]!r}, want {want[finite][worst]!r}, bound {bound[worst]:.3g}"
        )


def assert_exact(got, want, what: str = "") -> None:
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=what)


def rng_for(*key) -> np.random.Generator:
    """A generator seeded from the key's text (stable across processes, unlike hash())."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def normal(g: np.random.Generator, shape, std: float = 1.0, dtype=np.float32) -> np.ndarray:
    return (g.standard_normal(shape) * std).astype(dtype)


def bf16(g: np.random.Generator, shape, std: float = 1.0) -> "torch.Tensor":
    return torch.from_numpy(g.standard_normal(shape) * std).to(torch.bfloat16)


# Shapes [R, N] for the row-wise ops: a tiny one, a non-power-of-two partial tile, a long odd row.
ROW_SHAPES = [(3, 5), (7, 129), (2, 1000)]


Check = Callable[[Tuple[int, ...]], None]
CHECKS: Dict[str, Check] = {}
PARAMS: Dict[str, List] = {}


def check(op: str, params):
    """Register a check of `op` run once per item of `params`."""

    def deco(fn: Check) -> Check:
        CHECKS[op] = fn
        PARAMS[op] = list(params)
        return fn

    return deco


# ---- elementwise [x] ----
# scale 0: plain relative error. torch's float64 CPU kernels (Sleef / libm) are within an ulp or
# two of the exact function, far inside 1e-12.

def gelu_accurate(x, approximate: str):
    """gelu without torch's cancellation for x << 0: x * Phi(x) = 0.5 x erfc(-x / sqrt 2), and
    0.5 x (1 + tanh(y)) = x * sigmoid(2y). (Far out, erfc(z) magnifies the rounding of its argument
    z = -x / sqrt 2 by 2 z^2: both sides agree to ~2e-13 at z = 25, the last z before underflow.)"""
    if approximate == "tanh":
        return x * torch.sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))
    return 0.5 * x * torch.erfc(-x / math.sqrt(2.0))


def gelu_cancelled(x):
    """What torch's own float64 gelu loses for x < 0: 0.5 x (1 + erf) and 0.5 x (1 + tanh) round
    erf/tanh near -1 to an ulp of 1, an absolute error of ~0.5 |x| ulp(1) (F.gelu(-8.0) is -0.0;
    the exact value is -5.0e-15)."""
    return 0.5 * x.abs() * (x < 0)


class Ew:
    """An elementwise op's check: `torch_fn(x, attrs)` is PyTorch's own float64 op; `attr_sets`
    starts with PyTorch's default attrs (passed to gpuemu as nothing: it checks the schema's
    defaults). Where torch's float64 formula cancels, `torch_scale(x, attrs)` is the magnitude it
    cancels at (its absolute error is ~1 ulp of that) and `accurate(x, attrs)` is a cancellation-free
    float64 form that the reference must match to plain 1e-12 relative."""

    def __init__(self, torch_fn, attr_sets=({},), domain=None, exact=False, accurate=None, torch_scale=None):
        self.torch_fn, self.attr_sets, self.domain, self.exact = torch_fn, list(attr_sets), domain, exact
        self.accurate, self.torch_scale = accurate, torch_scale


ELEMENTWISE = {
    "relu": Ew(lambda x, a: torch.relu(x), exact=True),
    "leaky_relu": Ew(lambda x, a: F.leaky_relu(x, a["negative_slope"]),
                     [{"negative_slope": 0.01}, {"negative_slope": 0.2}]),
    "gelu": Ew(lambda x, a: F.gelu(x, approximate=a["approximate"]),
               [{"approximate": "none"}, {"approximate": "tanh"}],
               accurate=lambda x, a: gelu_accurate(x, a["approximate"]),
               torch_scale=lambda x, a: gelu_cancelled(x)),
    "silu": Ew(lambda x, a: F.silu(x)),
    "sigmoid": Ew(lambda x, a: torch.sigmoid(x)),
    "tanh": Ew(lambda x, a: torch.tanh(x)),
    # torch computes alpha * (exp(x) - 1), which cancels near 0; the reference uses expm1.
    "elu": Ew(lambda x, a: F.elu(x, a["alpha"]), [{"alpha": 1.0}, {"alpha": 0.5}, {"alpha": 2.0}],
              accurate=lambda x, a: torch.where(x > 0, x, a["alpha"] * torch.expm1(x)),
              torch_scale=lambda x, a: abs(a["alpha"]) * torch.exp(x.clamp(max=0.0)) * (x <= 0)),
    "softplus": Ew(lambda x, a: F.softplus(x, a["beta"], a["threshold"]),
                   [{"beta": 1.0, "threshold": 20.0}, {"beta": 2.0, "threshold": 1.0},
                    {"beta": 0.5, "threshold": 10.0}]),
    "exp": Ew(lambda x, a: torch.exp(x)),
    "log": Ew(lambda x, a: torch.log(x), domain=np.abs),
    "sqrt": Ew(lambda x, a: torch.sqrt(x), domain=np.abs),
    "rsqrt": Ew(lambda x, a: torch.rsqrt(x), domain=np.abs),
}


def _elementwise(op: str):
    ew = ELEMENTWISE[op]

    def compare(got, x, attrs, what):
        xd = t64(x)
        want = ew.torch_fn(xd, attrs)
        if ew.exact:
            assert_exact(got, np64(want), what)
            return
        scale = None if ew.torch_scale is None else ew.torch_scale(xd, attrs)
        assert_close(got, want, scale, what=what + " vs torch")
        if ew.accurate is not None:
            assert_close(got, ew.accurate(xd, attrs), what=what + " vs the cancellation-free form")

    @check(op, ROW_SHAPES)
    def run(shape):
        g = rng_for(op, shape)
        # float32 values from ~1e-3 to ~1e2 in magnitude, and a zero (log(0) = -inf, rsqrt(0) = inf)
        x = (normal(g, shape) * np.exp(g.uniform(-7, 5, size=shape))).astype(np.float32)
        x.flat[0] = 0.0
        xb = bf16(g, shape, std=4.0)
        if ew.domain is not None:
            x = ew.domain(x).astype(np.float32)
            xb = torch.from_numpy(ew.domain(xb.double().numpy())).to(torch.bfloat16)
        for i, attrs in enumerate(ew.attr_sets):
            passed = {} if i == 0 else attrs
            compare(gpuemu.reference(op, {"x": x}, **passed), x, attrs, f"{op} {attrs}")
            compare(gpuemu.reference(op, {"x": xb}, **passed), xb, attrs, f"{op} bf16 {attrs}")


for _op in ELEMENTWISE:
    _elementwise(_op)


# ---- binary [a, b] with broadcasting; gated [gate, up] ----


@check("add", ROW_SHAPES)
def _add(shape):
    _binary("add", shape, lambda a, b: a + b)


@check("mul", ROW_SHAPES)
def _mul(shape):
    _binary("mul", shape, lambda a, b: a * b)


def _binary(op, shape, fn):
    g = rng_for(op, shape)
    R, N = shape
    a = normal(g, shape, std=3.0)
    for bshape in ((R, N), (1, N), (R, 1), (1, 1)):
        b = normal(g, bshape, std=3.0)
        got = gpuemu.reference(op, {"a": a, "b": b})
        want = fn(t64(a), t64(b))
        # one correctly rounded operation on each side: the results agree bit for bit
        assert_exact(got, np64(want), f"{op} b{bshape}")


@check("swiglu", ROW_SHAPES)
def _swiglu(shape):
    g = rng_for("swiglu", shape)
    gate, up = normal(g, shape, std=4.0), normal(g, shape, std=2.0)
    assert_close(gpuemu.reference("swiglu", {"gate": gate, "up": up}), F.silu(t64(gate)) * t64(up), what="swiglu")


@check("geglu", ROW_SHAPES)
def _geglu(shape):
    # as gelu: against torch with its cancellation (0.5 |gate| |up|) as the scale, and against the
    # cancellation-free form to plain relative error.
    g = rng_for("geglu", shape)
    gate = (normal(g, shape) * np.exp(g.uniform(-5, 3, size=shape))).astype(np.float32)
    up = normal(g, shape, std=2.0)
    gd, ud = t64(gate), t64(up)
    for approx in ("none", "tanh"):
        got = gpuemu.reference("geglu", {"gate": gate, "up": up}, approximate=approx)
        assert_close(got, F.gelu(gd, approximate=approx) * ud, gelu_cancelled(gd) * ud.abs(),
                     what=f"geglu {approx} vs torch")
        assert_close(got, gelu_accurate(gd, approx) * ud, what=f"geglu {approx} vs the cancellation-free form")
    assert_close(gpuemu.reference("geglu", {"gate": gate, "up": up}), gelu_accurate(gd, "none") * ud,
                 what="geglu default")


# ---- reductions over dim ----


def _reduction(op, shape, fn, scale_fn=None, exact=False, std=3.0, mean_shift=0.0):
    g = rng_for(op, shape)
    x = normal(g, shape, std=std) + np.float32(mean_shift)
    for dim in (-1, 0):
        for keepdim in (False, True):
            got = gpuemu.reference(op, {"x": x}, dim=dim, keepdim=keepdim)
            want = fn(t64(x), dim, keepdim)
            what = f"{op} dim={dim} keepdim={keepdim}"
            if exact:
                assert_exact(got, np64(want), what)
            else:
                assert_close(got, want, None if scale_fn is None else scale_fn(t64(x), dim, keepdim), what=what)
    # defaults: dim=-1, keepdim=False
    got = gpuemu.reference(op, {"x": x})
    want = fn(t64(x), -1, False)
    (assert_exact(got, np64(want), op) if exact else
     assert_close(got, want, None if scale_fn is None else scale_fn(t64(x), -1, False), what=op))


@check("sum", ROW_SHAPES)
def _sum(shape):
    # scale sum|x|: different summation orders differ by ~ulp(sum|x|), not ulp(result).
    _reduction("sum", shape, lambda x, d, k: x.sum(d, keepdim=k),
               lambda x, d, k: x.abs().sum(d, keepdim=k))


@check("mean", ROW_SHAPES)
def _mean(shape):
    _reduction("mean", shape, lambda x, d, k: x.mean(d, keepdim=k),
               lambda x, d, k: x.abs().mean(d, keepdim=k))


@check("amax", ROW_SHAPES)
def _amax(shape):
    _reduction("amax", shape, lambda x, d, k: x.amax(d, keepdim=k), exact=True)


@check("argmax", ROW_SHAPES)
def _argmax(shape):
    g = rng_for("argmax", shape)
    x = normal(g, shape, std=3.0)
    for dim in (-1, 0):
        for keepdim in (False, True):
            got = gpuemu.reference("argmax", {"x": x}, dim=dim, keepdim=keepdim)
            want = torch.argmax(t64(x), dim=dim, keepdim=keepdim).numpy()
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want, err_msg=f"argmax dim={dim} keepdim={keepdim}")
    # ties: torch returns the first maximal index; so must the reference
    xt = np.zeros(shape, np.float32)
    xt[:, -1] = 1.0
    xt[:, shape[1] // 2] = 1.0
    np.testing.assert_array_equal(gpuemu.reference("argmax", {"x": xt}), torch.argmax(t64(xt), dim=-1).numpy())


@check("logsumexp", ROW_SHAPES)
def _logsumexp(shape):
    # scale |max| + 1: lse = max + log(sum exp(x - max)); both sides round the final add at the
    # magnitude of max (the result can be smaller than max when it cancels near 0).
    _reduction("logsumexp", shape, lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
               lambda x, d, k: x.abs().amax(d, keepdim=k) + 1.0, std=5.0)


@check("l2norm", ROW_SHAPES)
def _l2norm(shape):
    g = rng_for("l2norm", shape)
    x = normal(g, shape, std=3.0)
    for dim in (-1, 0):
        assert_close(gpuemu.reference("l2norm", {"x": x}, dim=dim), F.normalize(t64(x), p=2.0, dim=dim),
                     what=f"l2norm dim={dim}")
    # the eps floor: rows of tiny values are divided by eps, not by their norm
    tiny = (x * np.float32(1e-20)).astype(np.float32)
    for eps in (1e-12, 1e-3):
        assert_close(gpuemu.reference("l2norm", {"x": tiny}, eps=eps),
                     F.normalize(t64(tiny), p=2.0, dim=-1, eps=eps), what=f"l2norm tiny eps={eps}")
    assert_close(gpuemu.reference("l2norm", {"x": x}), F.normalize(t64(x), dim=-1), what="l2norm default")


@check("cumsum", ROW_SHAPES)
def _cumsum(shape):
    # scale: the running sum|x| (a prefix sum is a sum; see `sum`).
    g = rng_for("cumsum", shape)
    x = normal(g, shape, std=3.0)
    for dim in (-1, 0):
        assert_close(gpuemu.reference("cumsum", {"x": x}, dim=dim), torch.cumsum(t64(x), dim),
                     torch.cumsum(t64(x).abs(), dim), what=f"cumsum dim={dim}")
    assert_close(gpuemu.reference("cumsum", {"x": x}), torch.cumsum(t64(x), -1),
                 torch.cumsum(t64(x).abs(), -1), what="cumsum default")


@check("softmax", ROW_SHAPES)
def _softmax(shape):
    g = rng_for("softmax", shape)
    x = normal(g, shape, std=5.0)
    for dim in (-1, 0):
        assert_close(gpuemu.reference("softmax", {"x": x}, dim=dim), torch.softmax(t64(x), dim), what="softmax")


@check("softmax_backward", ROW_SHAPES)
def _softmax_backward(shape):
    # Against torch's float64 backward of the same (grad_out, y) (torch._softmax_backward_data, what
    # autograd calls), and against autograd itself at logits log(y): its output p = y / sum(y) is
    # the saved output there, and the gradient w.r.t. log(y) is the backward at (grad_out, p).
    # scale |y| (|g| + sum|g y|): the result is a difference of those terms times y.
    g = rng_for("softmax_backward", shape)
    x = normal(g, shape, std=3.0)
    go = normal(g, shape)
    for dim in (-1, 0):
        y = torch.softmax(t64(x), dim).float()
        want = torch._softmax_backward_data(t64(go), t64(y), dim, torch.float64)
        scale = t64(y).abs() * (t64(go).abs() + (t64(go) * t64(y)).abs().sum(dim, keepdim=True))
        got = gpuemu.reference("softmax_backward", {"grad_out": go, "y": y.numpy()}, dim=dim)
        assert_close(got, want, scale=scale, what="softmax_backward")
        ly = torch.log(t64(y)).requires_grad_(True)
        p = torch.softmax(ly, dim)
        p.backward(t64(go))
        got_p = gpuemu.reference("softmax_backward", {"grad_out": go, "y": p.detach().numpy()}, dim=dim)
        assert_close(got_p, ly.grad, scale=scale, what="softmax_backward (autograd)")


@check("log_softmax_backward", ROW_SHAPES)
def _log_softmax_backward(shape):
    # Against torch's float64 backward (torch._log_softmax_backward_data) and autograd through
    # log_softmax of a float64 log-probability row z (log_softmax(z) = z - lse(z), lse ~ 0): the
    # saved output is what log_softmax returns there. scale |g| + exp(y) sum|g|.
    g = rng_for("log_softmax_backward", shape)
    x = normal(g, shape, std=3.0)
    go = normal(g, shape)
    for dim in (-1, 0):
        y = torch.log_softmax(t64(x), dim).float()
        want = torch._log_softmax_backward_data(t64(go), t64(y), dim, torch.float64)
        scale = t64(go).abs() + torch.exp(t64(y)) * t64(go).abs().sum(dim, keepdim=True)
        got = gpuemu.reference("log_softmax_backward", {"grad_out": go, "y": y.numpy()}, dim=dim)
        assert_close(got, want, scale=scale, what="log_softmax_backward")
        z = t64(y).clone().requires_grad_(True)
        out = torch.log_softmax(z, dim)
        out.backward(t64(go))
        got_z = gpuemu.reference("log_softmax_backward", {"grad_out": go, "y": out.detach().numpy()}, dim=dim)
        assert_close(got_z, z.grad, scale=scale, what="log_softmax_backward (autograd)")


@check("rms_norm_backward", ROW_SHAPES)
def _rms_norm_backward(shape):
    # Against torch's float64 autograd through x * rsqrt(mean(x^2) + eps) * w, the reference given
    # the exact float64 rstd of x (as a forward saves it, unrounded here). scale: grad_x is a
    # difference of rstd |w g| and |x_hat| rstd mean|w g x_hat|; grad_weight a sum of |g x_hat|.
    g = rng_for("rms_norm_backward", shape)
    x, go, w = normal(g, shape), normal(g, shape), normal(g, shape[-1:])
    eps = 1e-6
    xd = t64(x).requires_grad_(True)
    wd = t64(w).requires_grad_(True)
    rstd = torch.rsqrt(xd.detach().pow(2).mean(-1) + eps)
    (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * wd).backward(t64(go))
    got_x, got_w = gpuemu.reference("rms_norm_backward", {"grad_out": go, "x": x, "rstd": rstd.numpy(), "weight": w},
                                    eps=eps)
    xh = t64(x) * rstd[:, None]
    wgo = t64(w) * t64(go)
    scale_x = rstd[:, None] * (wgo.abs() + xh.abs() * (wgo * xh).abs().mean(-1, keepdim=True))
    assert_close(got_x, xd.grad, scale=scale_x, what="rms_norm_backward grad_x")
    assert_close(got_w, wd.grad, scale=(t64(go) * xh).abs().sum(0), what="rms_norm_backward grad_weight")


@check("silu_backward", ROW_SHAPES)
def _silu_backward(shape):
    # Against torch's float64 autograd of F.silu, and torch.ops.aten.silu_backward in float64.
    g = rng_for("silu_backward", shape)
    x, go = normal(g, shape, std=4.0), normal(g, shape)
    xd = t64(x).requires_grad_(True)
    F.silu(xd).backward(t64(go))
    got = gpuemu.reference("silu_backward", {"grad_out": go, "x": x})
    assert_close(got, xd.grad, what="silu_backward")
    assert_close(got, torch.ops.aten.silu_backward(t64(go), t64(x)), what="silu_backward (aten)")


def gelu_prime_terms(x, approximate: str):
    """|first term| + |second term| of gelu'(x): Phi + |x| phi, or s + |0.5 x (1 - t^2) k (1 + 3c x^2)|;
    the derivative is their sum, which cancels near its zero (x ~ -0.75) in any float64 evaluation."""
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        y = k * (x + 0.044715 * x**3)
        s = torch.sigmoid(2.0 * y)
        return s + (2.0 * x * s * (1 - s) * k * (1 + 3 * 0.044715 * x * x)).abs()
    return 0.5 * torch.erfc(-x / math.sqrt(2.0)) + x.abs() * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


@check("gelu_backward", ROW_SHAPES)
def _gelu_backward(shape):
    # Both forms: against torch.ops.aten.gelu_backward in float64 (what autograd calls), whose
    # 0.5(1 + erf) / 0.5(1 + tanh) cancel for x < 0 (scale |g|: an ulp of 1 times g), and against
    # float64 autograd through the cancellation-free forward (gelu_accurate), scaled by the two terms
    # whose sum the derivative is (it crosses 0 near x = -0.75).
    g = rng_for("gelu_backward", shape)
    x = (normal(g, shape) * np.exp(g.uniform(-5, 2.5, size=shape))).astype(np.float32)
    go = normal(g, shape)
    for approx in ("none", "tanh"):
        got = gpuemu.reference("gelu_backward", {"grad_out": go, "x": x}, approximate=approx)
        assert_close(got, torch.ops.aten.gelu_backward(t64(go), t64(x), approximate=approx), t64(go).abs(),
                     what=f"gelu_backward {approx} (aten)")
        xd = t64(x).requires_grad_(True)
        gelu_accurate(xd, approx).backward(t64(go))
        assert_close(got, xd.grad, t64(go).abs() * gelu_prime_terms(t64(x), approx),
                     what=f"gelu_backward {approx} vs autograd of the cancellation-free form")


@check("swiglu_backward", ROW_SHAPES)
def _swiglu_backward(shape):
    g = rng_for("swiglu_backward", shape)
    gate, up, go = normal(g, shape, std=4.0), normal(g, shape), normal(g, shape)
    gd, ud = t64(gate).requires_grad_(True), t64(up).requires_grad_(True)
    (F.silu(gd) * ud).backward(t64(go))
    got_gate, got_up = gpuemu.reference("swiglu_backward", {"grad_out": go, "gate": gate, "up": up})
    assert_close(got_gate, gd.grad, what="swiglu_backward grad_gate")
    assert_close(got_up, ud.grad, what="swiglu_backward grad_up")


@check("matmul_backward", [(3, 5, 4), (33, 17, 65), (7, 129, 2)])
def _matmul_backward(mkn):
    # Against torch's float64 autograd through a @ b; scale |g| @ |b|^T and |a|^T @ |g| (dot products).
    m, k, n = mkn
    g = rng_for("matmul_backward", mkn)
    a, b, go = normal(g, (m, k)), normal(g, (k, n)), normal(g, (m, n))
    ad, bd = t64(a).requires_grad_(True), t64(b).requires_grad_(True)
    (ad @ bd).backward(t64(go))
    got_a, got_b = gpuemu.reference("matmul_backward", {"grad_out": go, "a": a, "b": b})
    assert_close(got_a, ad.grad, scale=t64(go).abs() @ t64(b).abs().T, what="matmul_backward grad_a")
    assert_close(got_b, bd.grad, scale=t64(a).abs().T @ t64(go).abs(), what="matmul_backward grad_b")


@check("linear_backward", [(3, 5, 4), (65, 17, 33), (7, 129, 2)])
def _linear_backward(mkn):
    # Against torch's float64 autograd through F.linear(x, weight, bias); scale |g| @ |W|, |g|^T @ |x|
    # and sum|g| over the rows (dot products and a column sum).
    m, k, n = mkn
    g = rng_for("linear_backward", mkn)
    x, w, go = normal(g, (m, k)), normal(g, (n, k)), normal(g, (m, n))
    xd, wd = t64(x).requires_grad_(True), t64(w).requires_grad_(True)
    bd = torch.zeros(n, dtype=torch.float64, requires_grad=True)
    F.linear(xd, wd, bd).backward(t64(go))
    got_x, got_w, got_b = gpuemu.reference("linear_backward", {"grad_out": go, "x": x, "weight": w})
    assert_close(got_x, xd.grad, scale=t64(go).abs() @ t64(w).abs(), what="linear_backward grad_x")
    assert_close(got_w, wd.grad, scale=t64(go).abs().T @ t64(x).abs(), what="linear_backward grad_weight")
    assert_close(got_b, bd.grad, scale=t64(go).abs().sum(0), what="linear_backward grad_bias")


@check("embedding_backward", [(2, 5, 3, 4), (4, 100, 33, 7), (1, 300, 8, 1000)])
def _embedding_backward(blvd):
    # Against torch's float64 autograd through F.embedding: repeated indices accumulate (scale sum|g|
    # over the positions that name a row), rows no index names are 0.
    b, l, v, d = blvd
    g = rng_for("embedding_backward", blvd)
    go = normal(g, (b, l, d))
    idx = g.integers(0, v, size=(b, l)).astype(np.int64)
    w = torch.zeros(v, d, dtype=torch.float64, requires_grad=True)
    F.embedding(torch.from_numpy(idx), w).backward(t64(go))
    got = gpuemu.reference("embedding_backward", {"grad_out": go, "indices": idx}, num_weights=v)
    scale = torch.zeros(v, d, dtype=torch.float64).index_add_(0, torch.from_numpy(idx).flatten(), t64(go).abs().reshape(-1, d))
    assert_close(got, w.grad, scale=scale, what="embedding_backward")


@check("layer_norm_backward", ROW_SHAPES)
def _layer_norm_backward(shape):
    # Against torch's float64 autograd of F.layer_norm(x, [N], w, b, eps), the reference given the
    # exact float64 mean and rstd of x (as a forward saves them, unrounded here); without a weight,
    # grad_x alone. scale: grad_x is a difference of rstd |w g|, rstd mean|w g| and |x_hat| rstd
    # mean|w g x_hat|; grad_weight a sum of |g x_hat|, grad_bias of |g|. x offset from 0 (3 + normal).
    g = rng_for("layer_norm_backward", shape)
    x, go, w, b = 3.0 + normal(g, shape), normal(g, shape), normal(g, shape[-1:]), normal(g, shape[-1:])
    eps = 1e-5
    n = shape[-1]
    x2, go2 = t64(x).reshape(-1, n), t64(go).reshape(-1, n)
    mean = x2.mean(-1)
    rstd = torch.rsqrt(x2.var(-1, unbiased=False) + eps)
    xh = (x2 - mean[:, None]) * rstd[:, None]
    for affine in (True, False):
        xd = x2.clone().requires_grad_(True)
        wd = t64(w).requires_grad_(True) if affine else None
        bd = t64(b).requires_grad_(True) if affine else None
        torch.nn.functional.layer_norm(xd, [n], wd, bd, eps).backward(go2)
        ins = {"grad_out": go.reshape(-1, n), "x": x.reshape(-1, n), "mean": mean.numpy(), "rstd": rstd.numpy()}
        if affine:
            ins["weight"] = w
        got = gpuemu.reference("layer_norm_backward", ins, eps=eps)
        got = got if isinstance(got, (tuple, list)) else (got,)
        assert len(got) == (3 if affine else 1)
        wgo = (t64(w) if affine else 1.0) * go2
        scale_x = rstd[:, None] * (wgo.abs() + wgo.abs().mean(-1, keepdim=True)
                                   + xh.abs() * (wgo * xh).abs().mean(-1, keepdim=True))
        assert_close(got[0], xd.grad, scale=scale_x, what=f"layer_norm_backward grad_x (affine={affine})")
        if affine:
            assert_close(got[1], wd.grad, scale=(go2 * xh).abs().sum(0), what="layer_norm_backward grad_weight")
            assert_close(got[2], bd.grad, scale=go2.abs().sum(0), what="layer_norm_backward grad_bias")


@check("log_softmax", ROW_SHAPES)
def _log_softmax(shape):
    # scale |x| + |max| + 1: log_softmax = (x - max) - log(sum), a difference of larger terms that
    # vanishes near the row's max (see test_reference_smoke.py).
    g = rng_for("log_softmax", shape)
    x = normal(g, shape, std=5.0)
    for dim in (-1, 0):
        xd = t64(x)
        scale = xd.abs() + xd.amax(dim, keepdim=True).abs() + 1.0
        assert_close(gpuemu.reference("log_softmax", {"x": x}, dim=dim), torch.log_softmax(xd, dim), scale,
                     what=f"log_softmax dim={dim}")


# ---- norms ----
# Scale: none beyond the result itself for the normalised values, except that
# (x - mean) / sigma * w + b is itself a sum: its elements near 0 carry the absolute error of
# |x_hat * w| + |b| (and x - mean the error of |x| + |mean|, relative to sigma).


@check("layer_norm", ROW_SHAPES)
def _layer_norm(shape):
    g = rng_for("layer_norm", shape)
    R, N = shape
    x = normal(g, shape, std=2.0) + np.float32(3.0)  # an offset mean: the two-pass variance matters
    w, b = normal(g, (N,)), normal(g, (N,))
    xd, wd, bd = t64(x), t64(w), t64(b)
    mu = xd.mean(-1, keepdim=True)
    sigma = torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + 1e-5)
    scale = ((xd.abs() + mu.abs()) / sigma) * wd.abs() + bd.abs()
    assert_close(gpuemu.reference("layer_norm", {"x": x, "weight": w, "bias": b}),
                 F.layer_norm(xd, [N], wd, bd, 1e-5), scale, what="layer_norm")
    assert_close(gpuemu.reference("layer_norm", {"x": x, "weight": w, "bias": b}, eps=0.25),
                 F.layer_norm(xd, [N], wd, bd, 0.25), scale, what="layer_norm eps")
    scale_plain = (xd.abs() + mu.abs()) / sigma
    assert_close(gpuemu.reference("layer_norm", {"x": x}), F.layer_norm(xd, [N], None, None, 1e-5),
                 scale_plain, what="layer_norm no affine")
    assert_close(gpuemu.reference("layer_norm", {"x": x, "weight": w}), F.layer_norm(xd, [N], wd, None, 1e-5),
                 scale_plain * wd.abs(), what="layer_norm weight only")


def torch_rms_norm(x, w, eps):
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


@check("rms_norm", ROW_SHAPES)
def _rms_norm(shape):
    # no torch 1.13 F.rms_norm: the schema's formula x / sqrt(mean(x^2) + eps) * weight.
    g = rng_for("rms_norm", shape)
    N = shape[1]
    x, w = normal(g, shape, std=2.0), normal(g, (N,))
    xd, wd = t64(x), t64(w)
    assert_close(gpuemu.reference("rms_norm", {"x": x, "weight": w}), torch_rms_norm(xd, wd, 1e-6), what="rms_norm")
    assert_close(gpuemu.reference("rms_norm", {"x": x, "weight": w}, eps=0.5), torch_rms_norm(xd, wd, 0.5),
                 what="rms_norm eps")
    assert_close(gpuemu.reference("rms_norm", {"x": x}), torch_rms_norm(xd, None, 1e-6), what="rms_norm no weight")


@check("group_norm", [(2, 3, 5, 7), (1, 4, 3, 129), (3, 1, 1, 33)])
def _group_norm(params):
    B, G, Cg, S = params
    C = G * Cg
    g = rng_for("group_norm", params)
    x = normal(g, (B, C, S), std=2.0) + np.float32(1.5)
    w, b = normal(g, (C,)), normal(g, (C,))
    xd, wd, bd = t64(x), t64(w), t64(b)
    xg = xd.reshape(B, G, -1)
    mu = xg.mean(-1, keepdim=True)
    sigma = torch.sqrt(xg.var(-1, unbiased=False, keepdim=True) + 1e-5)
    plain = ((xg.abs() + mu.abs()) / sigma).reshape(B, C, S)
    scale = plain * wd[:, None].abs() + bd[:, None].abs()
    assert_close(gpuemu.reference("group_norm", {"x": x, "weight": w, "bias": b}, num_groups=G),
                 F.group_norm(xd, G, wd, bd, 1e-5), scale, what="group_norm")
    assert_close(gpuemu.reference("group_norm", {"x": x}, num_groups=G, eps=0.1),
                 F.group_norm(xd, G, None, None, 0.1), plain, what="group_norm no affine")


@check("batch_norm", [(2, 3, 5), (3, 7, 129), (1, 1, 1)])
def _batch_norm(params):
    B, C, S = params
    g = rng_for("batch_norm", params)
    x = normal(g, (B, C, S), std=2.0)
    rm = normal(g, (C,))
    rv = (np.abs(normal(g, (C,))) + np.float32(0.1)).astype(np.float32)
    w, b = normal(g, (C,)), normal(g, (C,))
    xd, rmd, rvd, wd, bd = map(t64, (x, rm, rv, w, b))
    inv = 1.0 / torch.sqrt(rvd + 1e-5)
    plain = (xd.abs() + rmd[:, None].abs()) * inv[:, None]
    scale = plain * wd[:, None].abs() + bd[:, None].abs()
    got = gpuemu.reference("batch_norm", {"x": x, "running_mean": rm, "running_var": rv, "weight": w, "bias": b})
    want = F.batch_norm(xd, rmd, rvd, wd, bd, training=False, eps=1e-5)
    assert_close(got, want, scale, what="batch_norm")
    got = gpuemu.reference("batch_norm", {"x": x, "running_mean": rm, "running_var": rv}, eps=0.01)
    want = F.batch_norm(xd, rmd, rvd, None, None, training=False, eps=0.01)
    assert_close(got, want, plain, what="batch_norm no affine")


# ---- GEMM-shaped: scale |a| @ |b| (the dot product's condition), + |bias| ----


@check("matmul", [(3, 4, 5), (17, 129, 33), (1, 1000, 1), (64, 64, 64)])
def _matmul(mkn):
    M, K, N = mkn
    g = rng_for("matmul", mkn)
    a, b = normal(g, (M, K)), normal(g, (K, N))
    ad, bd = t64(a), t64(b)
    assert_close(gpuemu.reference("matmul", {"a": a, "b": b}), ad @ bd, ad.abs() @ bd.abs(), what="matmul")
    # a transposed (non-contiguous) view and float16 values
    at = np.asfortranarray(a.astype(np.float16))
    assert_close(gpuemu.reference("matmul", {"a": at, "b": b.astype(np.float16)}),
                 t64(at) @ t64(b.astype(np.float16)), t64(at).abs() @ t64(b.astype(np.float16)).abs(),
                 what="matmul fp16 transposed")


@check("bmm", [(2, 3, 4, 5), (3, 17, 65, 9)])
def _bmm(bmkn):
    B, M, K, N = bmkn
    g = rng_for("bmm", bmkn)
    a, b = normal(g, (B, M, K)), normal(g, (B, K, N))
    ad, bd = t64(a), t64(b)
    assert_close(gpuemu.reference("bmm", {"a": a, "b": b}), torch.bmm(ad, bd), torch.bmm(ad.abs(), bd.abs()),
                 what="bmm")


@check("linear", [(2, 3, 4, 5), (3, 17, 129, 33), (1, 1, 7, 1)])
def _linear(bmkn):
    B, M, K, N = bmkn
    g = rng_for("linear", bmkn)
    x, w, b = normal(g, (B, M, K)), normal(g, (N, K)), normal(g, (N,))
    xd, wd, bd = t64(x), t64(w), t64(b)
    cond = xd.abs() @ wd.abs().T
    assert_close(gpuemu.reference("linear", {"x": x, "weight": w, "bias": b}), F.linear(xd, wd, bd),
                 cond + bd.abs(), what="linear")
    assert_close(gpuemu.reference("linear", {"x": x, "weight": w}), F.linear(xd, wd), cond, what="linear no bias")


# ---- attention ----
# No scaled_dot_product_attention in torch 1.13: softmax(q k^T * scale + mask) v in float64.
# Scale: P @ |V| (the output is a convex combination of value rows, which can cancel) plus the
# scores' own condition |scale| (|q|.|k|) carried through P @ |V|.


def torch_attention(q, k, v, causal=False, scale=None, lens=None):
    """q [B,H,Lq,D], k/v [B,Hkv,Lk,D] (GQA by repeat), causal top-left; lens[b] limits the keys."""
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    s = 1.0 / math.sqrt(D) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * s
    mask = torch.zeros(B, 1, Lq, Lk, dtype=torch.bool)
    if causal:
        mask |= torch.ones(Lq, Lk, dtype=torch.bool).triu(1)
    if lens is not None:
        for bi, n in enumerate(lens):
            mask[bi, :, :, int(n):] = True
    scores = scores.masked_fill(mask, -math.inf)
    p = torch.softmax(scores, -1)
    cond_scores = (q.abs() @ k.abs().transpose(-1, -2)) * abs(s)
    out = p @ v
    scale_term = p @ v.abs() + (p * cond_scores) @ v.abs()
    return out, scale_term


FLASH_PARAMS = [
    # B, H, Hkv, Lq, Lk, D
    (1, 2, 2, 3, 5, 4),
    (2, 3, 3, 17, 33, 24),
    (1, 4, 2, 7, 65, 16),
    (2, 2, 1, 40, 13, 8),  # Lq > Lk: causal rows beyond Lk see every key
]


@check("flash_attention", FLASH_PARAMS)
def _flash_attention(p):
    B, H, Hkv, Lq, Lk, D = p
    g = rng_for("flash_attention", p)
    q, k, v = normal(g, (B, H, Lq, D)), normal(g, (B, Hkv, Lk, D)), normal(g, (B, Hkv, Lk, D))
    gqa = Hkv != H
    for causal in (False, True):
        for scale in (None, 0.5):
            got = gpuemu.reference("flash_attention", {"q": q, "k": k, "v": v}, causal=causal, scale=scale,
                                   enable_gqa=gqa)
            want, sc = torch_attention(t64(q), t64(k), t64(v), causal, scale)
            assert_close(got, want, sc, what=f"flash_attention {p} causal={causal} scale={scale}")


@check("flash_attention_backward", FLASH_PARAMS)
def _flash_attention_backward(p):
    # Against torch's float64 autograd through softmax(q k^T * scale) v, and through torch 1.13's
    # SDPA (torch._scaled_dot_product_attention_math) at the default scale (GQA by repeat_interleave,
    # whose backward sums each group), the reference given that forward's exact float64 out and
    # (natural-log) lse. scale: P (|dO| |v|^T + sum|dO out|) times |k| or |q| (dq, dk), P^T |dO| (dv).
    B, H, Hkv, Lq, Lk, D = p
    g = rng_for("flash_attention_backward", p)
    q, k, v, go = (normal(g, (B, H, Lq, D)), normal(g, (B, Hkv, Lk, D)), normal(g, (B, Hkv, Lk, D)),
                   normal(g, (B, H, Lq, D)))
    gqa = Hkv != H
    for causal in (False, True):
        for scale in (None, 0.5):
            qd, kd, vd = (t64(x).requires_grad_(True) for x in (q, k, v))
            out, _ = torch_attention(qd, kd, vd, causal, scale)
            out.backward(t64(go))
            s = 1.0 / math.sqrt(D) if scale is None else scale
            kr, vr = t64(k), t64(v)
            if gqa:
                kr, vr = kr.repeat_interleave(H // Hkv, dim=1), vr.repeat_interleave(H // Hkv, dim=1)
            scores = (t64(q) @ kr.transpose(-1, -2)) * s
            if causal:
                scores = scores.masked_fill(torch.ones(Lq, Lk, dtype=torch.bool).triu(1), -math.inf)
            lse = torch.logsumexp(scores, -1)
            o = out.detach()
            got = gpuemu.reference("flash_attention_backward",
                                   {"grad_out": go, "q": q, "k": k, "v": v, "out": o.numpy(), "lse": lse.numpy()},
                                   causal=causal, scale=scale, enable_gqa=gqa)
            P = torch.softmax(scores, -1)
            ds_scale = P * (t64(go).abs() @ vr.abs().transpose(-1, -2) + (t64(go) * o).abs().sum(-1, keepdim=True))
            fold = (lambda x: x.reshape(B, Hkv, H // Hkv, Lk, D).sum(2))
            what = f"flash_attention_backward {p} causal={causal} scale={scale}"
            assert_close(got[0], qd.grad, abs(s) * ds_scale @ kr.abs(), what=what + " grad_q")
            assert_close(got[1], kd.grad, fold(abs(s) * ds_scale.transpose(-1, -2) @ t64(q).abs()), what=what + " grad_k")
            assert_close(got[2], vd.grad, fold(P.transpose(-1, -2) @ t64(go).abs()), what=what + " grad_v")
            if scale is None and hasattr(torch, "_scaled_dot_product_attention_math"):
                # torch 1.13's SDPA (no scale argument, no GQA there: k, v repeated), float64 autograd
                qs, ks, vs = (t64(x).requires_grad_(True) for x in (q, k, v))
                kk, vv = (ks.repeat_interleave(H // Hkv, dim=1), vs.repeat_interleave(H // Hkv, dim=1)) if gqa else (ks, vs)
                torch._scaled_dot_product_attention_math(qs, kk, vv, None, 0.0, False, causal)[0].backward(t64(go))
                assert_close(got[0], qs.grad, abs(s) * ds_scale @ kr.abs(), what=what + " grad_q (SDPA)")
                assert_close(got[1], ks.grad, fold(abs(s) * ds_scale.transpose(-1, -2) @ t64(q).abs()),
                             what=what + " grad_k (SDPA)")
                assert_close(got[2], vs.grad, fold(P.transpose(-1, -2) @ t64(go).abs()), what=what + " grad_v (SDPA)")


@check("decode_attention", [(1, 2, 2, 5, 4), (3, 4, 2, 129, 24), (2, 8, 1, 33, 64)])
def _decode_attention(p):
    B, H, Hkv, L, D = p
    g = rng_for("decode_attention", p)
    q, k, v = normal(g, (B, H, D)), normal(g, (B, Hkv, L, D)), normal(g, (B, Hkv, L, D))
    lens = g.integers(1, L + 1, size=B)
    lens[0] = L
    # garbage beyond each batch's length must not matter
    for bi, n in enumerate(lens):
        k[bi, :, n:] = 1e4
        v[bi, :, n:] = np.nan
    for dt in (np.int64, np.int32):
        for scale in (None, 0.125):
            got = gpuemu.reference("decode_attention", {"q": q, "k_cache": k, "v_cache": v,
                                                        "seq_lens": lens.astype(dt)}, scale=scale)
            kk = t64(np.nan_to_num(k, nan=0.0))
            vv = t64(np.nan_to_num(v, nan=0.0))
            want, sc = torch_attention(t64(q)[:, :, None, :], kk, vv, False, scale, lens)
            assert_close(got, want[:, :, 0, :], sc[:, :, 0, :], what=f"decode_attention {p} {dt.__name__}")


# ---- rope ----


def torch_rope(x, theta, style, offset):
    """x [B,L,H,D]: pair i turns by (offset + l) * theta^(-2i/D)."""
    B, L, H, D = x.shape
    i = torch.arange(D // 2, dtype=torch.float64)
    inv_freq = torch.pow(torch.tensor(theta, dtype=torch.float64), -(2.0 * i) / D)
    phi = (offset + torch.arange(L, dtype=torch.float64))[:, None] * inv_freq[None, :]  # [L, D/2]
    c, s = torch.cos(phi)[None, :, None, :], torch.sin(phi)[None, :, None, :]
    if style == "half":
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    # the angle is known to ~1 ulp of |phi| in fp64 (pow, then a product): the output to
    # (|x1| + |x2|) * |phi| * ulp, absolute -- positions ~1e5 make that larger than 1e-12 |out|.
    mag = (x1.abs() + x2.abs()) * (1.0 + phi[None, :, None, :].abs())
    out = torch.empty_like(x)
    scale = torch.empty_like(x)
    if style == "half":
        out[..., : D // 2], out[..., D // 2 :] = o1, o2
        scale[..., : D // 2], scale[..., D // 2 :] = mag, mag
    else:
        out[..., 0::2], out[..., 1::2] = o1, o2
        scale[..., 0::2], scale[..., 1::2] = mag, mag
    return out, scale


@check("rope", [(1, 3, 2, 4), (2, 17, 3, 24), (1, 129, 1, 2)])
def _rope(p):
    g = rng_for("rope", p)
    x = normal(g, p)
    for style in ("half", "interleaved"):
        for theta, offset in ((10000.0, 0), (500000.0, 4095), (1e6, 100000)):
            got = gpuemu.reference("rope", {"x": x}, theta=theta, style=style, offset=offset)
            want, scale = torch_rope(t64(x), theta, style, offset)
            assert_close(got, want, scale, what=f"rope {style} theta={theta} offset={offset}")
    want, scale = torch_rope(t64(x), 10000.0, "half", 0)
    assert_close(gpuemu.reference("rope", {"x": x}), want, scale, what="rope defaults")


@check("rope_backward", [(1, 3, 2, 4), (2, 17, 3, 24), (1, 129, 1, 2)])
def _rope_backward(p):
    # Against torch's float64 autograd through torch_rope (the gradient of a rotation), scale as rope's.
    g = rng_for("rope_backward", p)
    go = normal(g, p)
    for style in ("half", "interleaved"):
        for theta, offset in ((10000.0, 0), (500000.0, 4095), (1e6, 100000)):
            x = torch.zeros(p, dtype=torch.float64, requires_grad=True)
            torch_rope(x, theta, style, offset)[0].backward(t64(go))
            got = gpuemu.reference("rope_backward", {"grad_out": go}, theta=theta, style=style, offset=offset)
            _, scale = torch_rope(t64(go), theta, style, offset)
            assert_close(got, x.grad, scale, what=f"rope_backward {style} theta={theta} offset={offset}")


# ---- convolution: scale |x| (*) |w| + |bias| ----


CONV1D = [
    # B, Cin, Cout, L, K, stride, padding, dilation, groups
    (1, 2, 3, 7, 3, 1, 0, 1, 1),
    (2, 4, 6, 129, 5, 2, 2, 1, 2),
    (3, 4, 4, 33, 3, 3, 4, 3, 4),
]


@check("conv1d", CONV1D)
def _conv1d(p):
    B, Cin, Cout, L, K, stride, padding, dilation, groups = p
    g = rng_for("conv1d", p)
    x, w, b = normal(g, (B, Cin, L)), normal(g, (Cout, Cin // groups, K)), normal(g, (Cout,))
    xd, wd, bd = t64(x), t64(w), t64(b)
    kw = dict(stride=[stride], padding=[padding], dilation=[dilation], groups=groups)
    cond = F.conv1d(xd.abs(), wd.abs(), None, stride, padding, dilation, groups)
    assert_close(gpuemu.reference("conv1d", {"x": x, "weight": w, "bias": b}, **kw),
                 F.conv1d(xd, wd, bd, stride, padding, dilation, groups), cond + bd.abs()[:, None], what=f"conv1d {p}")
    assert_close(gpuemu.reference("conv1d", {"x": x, "weight": w}, **kw),
                 F.conv1d(xd, wd, None, stride, padding, dilation, groups), cond, what=f"conv1d no bias {p}")


CONV2D = [
    # B, Cin, Cout, H, W, Kh, Kw, stride, padding, dilation, groups
    (1, 1, 2, 5, 6, 3, 3, (1, 1), (0, 0), (1, 1), 1),
    (2, 6, 3, 17, 13, 3, 5, (1, 2), (1, 0), (1, 1), 3),
    (1, 4, 8, 33, 9, 5, 3, (2, 2), (0, 3), (2, 2), 2),
    (2, 4, 4, 11, 12, 2, 2, (3, 3), (2, 2), (1, 3), 4),
]


@check("conv2d", CONV2D)
def _conv2d(p):
    B, Cin, Cout, H, W, Kh, Kw, stride, padding, dilation, groups = p
    g = rng_for("conv2d", p)
    x, w, b = normal(g, (B, Cin, H, W)), normal(g, (Cout, Cin // groups, Kh, Kw)), normal(g, (Cout,))
    xd, wd, bd = t64(x), t64(w), t64(b)
    kw = dict(stride=list(stride), padding=list(padding), dilation=list(dilation), groups=groups)
    cond = F.conv2d(xd.abs(), wd.abs(), None, stride, padding, dilation, groups)
    assert_close(gpuemu.reference("conv2d", {"x": x, "weight": w, "bias": b}, **kw),
                 F.conv2d(xd, wd, bd, stride, padding, dilation, groups), cond + bd.abs()[:, None, None],
                 what=f"conv2d {p}")


# ---- loss and gather ----


@check("cross_entropy", [(3, 5), (17, 129), (2, 1000)])
def _cross_entropy(shape):
    # scale: per row |max| + |lse| + |x_t| + 1 (the loss is lse - x_t, a difference of larger
    # terms); summed over rows for 'sum' and averaged for 'mean'.
    N, C = shape
    g = rng_for("cross_entropy", shape)
    logits = normal(g, shape, std=4.0)
    target = g.integers(0, C, size=N).astype(np.int64)
    ld = t64(logits)
    lse = torch.logsumexp(ld, -1)
    row_scale = ld.abs().amax(-1) + lse.abs() + 1.0 + ld.abs().mean(-1)
    for ignore in (-100, 0):
        tgt = target.copy()
        if N > 1:
            tgt[1] = ignore
        tt = torch.from_numpy(tgt)
        kept = tt != ignore
        for smoothing in (0.0, 0.1):
            per_row = row_scale + ld.gather(1, tt.clamp(0, C - 1)[:, None])[:, 0].abs()
            per_row = per_row * kept
            for reduction in ("none", "sum", "mean"):
                got = gpuemu.reference("cross_entropy", {"logits": logits, "target": tgt}, ignore_index=ignore,
                                       reduction=reduction, label_smoothing=smoothing)
                want = F.cross_entropy(ld, tt, ignore_index=ignore, reduction=reduction, label_smoothing=smoothing)
                scale = {"none": per_row, "sum": per_row.sum(), "mean": per_row.sum() / kept.sum()}[reduction]
                assert_close(got, want, scale, what=f"cross_entropy ignore={ignore} s={smoothing} {reduction}")
    # defaults: mean, ignore_index=-100, no smoothing
    tt = torch.from_numpy(target)
    per_row = row_scale + ld.gather(1, tt[:, None])[:, 0].abs()
    assert_close(gpuemu.reference("cross_entropy", {"logits": logits, "target": target}),
                 F.cross_entropy(ld, tt), per_row.mean(), what="cross_entropy default")


@check("cross_entropy_backward", [(3, 5), (17, 129), (2, 1000)])
def _cross_entropy_backward(shape):
    # Against torch's float64 autograd through F.cross_entropy (every reduction, 'none' with one
    # upstream gradient per row; both ignore indices, with and without smoothing); scale |k| (p + q)
    # per element, k the upstream gradient over the rows counted, or the row's own.
    N, C = shape
    g = rng_for("cross_entropy_backward", shape)
    logits = normal(g, shape, std=4.0)
    target = g.integers(0, C, size=N).astype(np.int64)
    go_scalar = np.array(-1.375, dtype=np.float64)
    go_rows = normal(g, (N,), std=2.0)  # 'none': one upstream gradient per row, a zero among them
    go_rows[0] = 0.0
    for ignore in (-100, 0):
        tgt = target.copy()
        if N > 1:
            tgt[1] = ignore
        tt = torch.from_numpy(tgt)
        for smoothing in (0.0, 0.1):
            for reduction in ("sum", "mean", "none"):
                go = go_rows if reduction == "none" else go_scalar
                ld = t64(logits).requires_grad_(True)
                F.cross_entropy(ld, tt, ignore_index=ignore, reduction=reduction,
                                label_smoothing=smoothing).backward(t64(np.asarray(go)))
                got = gpuemu.reference("cross_entropy_backward", {"grad_out": go, "logits": logits, "target": tgt},
                                       ignore_index=ignore, reduction=reduction, label_smoothing=smoothing)
                kept = (tt != ignore).double()[:, None]
                if reduction == "none":
                    k = t64(np.abs(go_rows))[:, None]
                else:
                    k = abs(float(go)) / (kept.sum() if reduction == "mean" else 1.0)
                scale = k * (torch.softmax(t64(logits), -1) + 1.0) * kept
                assert_close(got, ld.grad, scale,
                             what=f"cross_entropy_backward ignore={ignore} s={smoothing} {reduction}")


@check("embedding", [(5, 3, 2, 4), (1000, 129, 3, 17)])
def _embedding(p):
    V, D, B, L = p
    g = rng_for("embedding", p)
    w = normal(g, (V, D))
    idx = g.integers(0, V, size=(B, L)).astype(np.int64)
    idx.flat[0] = V - 1
    got = gpuemu.reference("embedding", {"weight": w, "indices": idx})
    assert_exact(got, F.embedding(torch.from_numpy(idx), t64(w)).numpy(), "embedding")
    wb = bf16(g, (V, D))
    assert_exact(gpuemu.reference("embedding", {"weight": wb, "indices": idx}),
                 F.embedding(torch.from_numpy(idx), t64(wb)).numpy(), "embedding bf16")


# ---- fp8 ----
# torch 1.13 has no float8 dtypes: e4m3fn is decoded here from its definition (OCP FP8: bias 7,
# no infinities, S.1111.111 is NaN), independently of gpuemu.dtypes.


def e4m3fn_values() -> np.ndarray:
    """The float64 value of each of the 256 e4m3fn bit patterns."""
    out = np.empty(256)
    for bits in range(256):
        sign = -1.0 if bits & 0x80 else 1.0
        e, m = (bits >> 3) & 0xF, bits & 0x7
        if e == 0xF and m == 0x7:
            out[bits] = math.nan
        elif e == 0:
            out[bits] = sign * m * 2.0 ** -9  # subnormal: m/8 * 2^-6
        else:
            out[bits] = sign * (1 + m / 8) * 2.0 ** (e - 7)
    return out


@check("fp8_quantize", ROW_SHAPES)
def _fp8_quantize(shape):
    # The reference is the clamped fp64 quotient, unrounded: one division, so it is exact to the
    # last bit (compared exactly).
    g = rng_for("fp8_quantize", shape)
    x = normal(g, shape, std=100.0)
    for scale in (1.0, 0.1, 3.0):
        s = np.array(scale, np.float32)
        got = gpuemu.reference("fp8_quantize", {"x": x, "scale": s})
        want = torch.clamp(t64(x) / float(s), -448.0, 448.0)
        assert_exact(got, want.numpy(), f"fp8_quantize scale={scale}")


@check("scaled_fp8_matmul", [(3, 4, 5), (17, 129, 33), (16, 64, 48)])
def _scaled_fp8_matmul(mkn):
    M, K, N = mkn
    g = rng_for("scaled_fp8_matmul", mkn)
    table = e4m3fn_values()
    finite = np.flatnonzero(np.isfinite(table)).astype(np.uint8)
    a_bits = g.choice(finite, size=(M, K)).astype(np.uint8)
    b_bits = g.choice(finite, size=(K, N)).astype(np.uint8)
    ad, bd = torch.from_numpy(table[a_bits]), torch.from_numpy(table[b_bits])
    sa, sb = np.array(0.5, np.float32), np.array(3.0, np.float32)
    for out_dtype in ("bfloat16", "float32"):
        got = gpuemu.reference("scaled_fp8_matmul",
                               {"a": (a_bits, "float8_e4m3fn"), "b": (b_bits, "float8_e4m3fn"),
                                "scale_a": sa, "scale_b": sb}, out_dtype=out_dtype)
        want = (ad @ bd) * float(sa) * float(sb)
        assert_close(got, want, (ad.abs() @ bd.abs()) * float(sa) * float(sb), what=f"scaled_fp8_matmul {out_dtype}")


# ---- the tests ----


def test_elementwise_special_values_follow_torch():
    """NaN, +-Inf, +-0, overflow-range and subnormal inputs give torch's float64 results (the same
    NaN positions and infinities; finite values within the usual bound). The one difference, the
    sign of elu(-0) (torch: +0 from exp(-0) - 1; the reference: -0 from expm1(-0)), is a sign of
    zero, which assert_close does not compare."""
    x = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 100.0, -100.0, 1e-40, -1e-40]], np.float32)
    for op, ew in ELEMENTWISE.items():
        for attrs in ew.attr_sets:
            got = gpuemu.reference(op, {"x": x}, **attrs)
            xd = t64(x)
            scale = None if ew.torch_scale is None else ew.torch_scale(xd, attrs).nan_to_num(0.0, 0.0, 0.0)
            assert_close(got, ew.torch_fn(xd, attrs), scale, what=f"{op} {attrs} special values")


def test_every_op_has_an_accuracy_check():
    builtin = {p.stem for p in SCHEMA_DIR.glob("*.json")}
    assert builtin, SCHEMA_DIR
    assert builtin <= set(gpuemu.ops())
    assert set(CHECKS) == builtin, f"missing: {sorted(builtin - set(CHECKS))}, extra: {sorted(set(CHECKS) - builtin)}"


@pytest.mark.parametrize(
    "op,param", [pytest.param(op, p, id=f"{op}-{'x'.join(map(str, p))}") for op in sorted(CHECKS) for p in PARAMS[op]]
)
def test_reference_matches_torch_float64(op, param):
    torch.set_num_threads(2)
    CHECKS[op](param)
