"""Mutable controls of the elementwise ops, rope, embedding, fp8_quantize, amax and argmax.

The control of an elementwise op is "upcast to fp32, compute, cast back"; the mutation rounds the
fp32 result before the cast (``result``): an f(x) evaluated with a k-times larger roundoff. Where
the op has a separate intermediate (the gate's activation, rope's angles) it has its own site.
"""

from __future__ import annotations

from typing import Callable, Dict

import torch
import torch.nn.functional as F

from bench.power.kernel import Args, MutableKernel, Outputs, case_dtype, f32
from bench.power.rounding import Mutation

RESULT = {"result": "the fp32 result of f before the cast to the output dtype"}


def _unary(op: str, f: Callable[[torch.Tensor, Args], torch.Tensor], control: str) -> MutableKernel:
    def fn(args: Args, mut: Mutation) -> Outputs:
        return [(mut(f(f32(args["x"]), args), "result", fresh=True), case_dtype(args, "x"))]

    return MutableKernel(op, control, dict(RESULT), fn)


def _binary(op: str, f: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], control: str) -> MutableKernel:
    def fn(args: Args, mut: Mutation) -> Outputs:
        return [(mut(f(f32(args["a"]), f32(args["b"])), "result", fresh=True), case_dtype(args, "a"))]

    return MutableKernel(op, control, dict(RESULT), fn)


def _gated(op: str, act: Callable[[torch.Tensor, Args], torch.Tensor], control: str) -> MutableKernel:
    def fn(args: Args, mut: Mutation) -> Outputs:
        a = mut(act(f32(args["gate"]), args), "activation", fresh=True)
        return [(mut(a * f32(args["up"]), "result"), case_dtype(args, "gate"))]

    sites = {"activation": "the gate's fp32 activation (silu/gelu of gate) before the product",
             "result": "the fp32 product activation * up before the cast"}
    return MutableKernel(op, control, sites, fn)


def _rope(args: Args, mut: Mutation) -> Outputs:
    """HF's fp32 cache (inv_freq, positions, angles = outer(t, inv_freq), cos/sin in fp32), the
    rotation in fp32, cast back once (impls.rope_fp32)."""
    x = args["x"]
    xf = f32(x)
    length, d = x.shape[1], x.shape[-1]
    inv_freq = 1.0 / (args["theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    t = torch.arange(length, dtype=torch.float32) + float(args["offset"])
    ang = mut(torch.outer(t, inv_freq), "angles", fresh=True)  # [k, L, D/2]
    c, s = ang.cos()[:, None, :, None, :], ang.sin()[:, None, :, None, :]  # [k, 1, L, 1, D/2]
    xf = xf[None]
    if args["style"] == "interleaved":
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    else:
        x1, x2 = xf[..., : d // 2], xf[..., d // 2:]
        out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    return [(mut(out, "result"), case_dtype(args, "x"))]


def _embedding(args: Args, mut: Mutation) -> Outputs:
    w = args["weight"]
    return [(mut(f32(F.embedding(args["indices"], w)), "result", fresh=True), case_dtype(args, "weight"))]


def _fp8_quantize(args: Args, mut: Mutation) -> Outputs:
    q = torch.clamp(f32(args["x"]) / f32(args["scale"]), -448.0, 448.0)
    return [(mut(q, "result", fresh=True), "float8_e4m3fn")]


def _amax(args: Args, mut: Mutation) -> Outputs:
    x = args["x"]
    out = torch.amax(f32(x), dim=args["dim"], keepdim=args["keepdim"])
    return [(mut(out, "result", fresh=True), case_dtype(args, "x"))]


def _argmax(args: Args, mut: Mutation) -> Outputs:
    x = args["x"]
    d = args["dim"] % x.dim()
    xr = mut(f32(x), "compared", fresh=True)  # values compared at the mutant's precision
    return [(torch.argmax(xr, dim=d + 1, keepdim=args["keepdim"]), "int64")]


def _gelu(x: torch.Tensor, a: Args) -> torch.Tensor:
    return F.gelu(x, approximate=a["approximate"])


KERNELS: Dict[str, MutableKernel] = {k.op: k for k in (
    _unary("exp", lambda x, a: torch.exp(x), "torch.exp in fp32"),
    _unary("log", lambda x, a: torch.log(x), "torch.log in fp32"),
    _unary("sqrt", lambda x, a: torch.sqrt(x), "torch.sqrt in fp32"),
    _unary("rsqrt", lambda x, a: torch.rsqrt(x), "torch.rsqrt in fp32"),
    _unary("sigmoid", lambda x, a: torch.sigmoid(x), "torch.sigmoid in fp32"),
    _unary("tanh", lambda x, a: torch.tanh(x), "torch.tanh in fp32"),
    _unary("silu", lambda x, a: F.silu(x), "F.silu in fp32"),
    _unary("gelu", _gelu, "F.gelu in fp32 (erf or tanh)"),
    _unary("elu", lambda x, a: F.elu(x, alpha=a["alpha"]), "F.elu in fp32"),
    _unary("softplus", lambda x, a: F.softplus(x, beta=a["beta"], threshold=a["threshold"]), "F.softplus in fp32"),
    _unary("leaky_relu", lambda x, a: F.leaky_relu(x, a["negative_slope"]), "F.leaky_relu in fp32"),
    _unary("relu", lambda x, a: torch.relu(x), "torch.relu in fp32"),
    _binary("add", torch.add, "a + b in fp32"),
    _binary("mul", torch.mul, "a * b in fp32"),
    _gated("swiglu", lambda x, a: F.silu(x), "F.silu(gate) * up in fp32"),
    _gated("geglu", _gelu, "F.gelu(gate) * up in fp32"),
    MutableKernel("rope", "rotation in fp32 with HF's fp32 angle cache, cast back once",
                  {"angles": "the fp32 angles t * inv_freq before cos/sin",
                   "result": "the rotated fp32 values before the cast"}, _rope),
    MutableKernel("embedding", "F.embedding (a gather)",
                  {"result": "the gathered row held in fp32 before the store"}, _embedding,
                  work=lambda a: a["indices"].numel() * a["weight"].shape[-1]),
    MutableKernel("fp8_quantize", "clamp(x / scale, -448, 448) in fp32, cast to e4m3",
                  {"result": "the fp32 quotient x / scale before the cast to e4m3"}, _fp8_quantize),
    MutableKernel("amax", "torch.amax in fp32", {"result": "the fp32 maximum before the store"}, _amax),
    MutableKernel("argmax", "torch.argmax in fp32",
                  {"compared": "the values the comparisons read (an index picked on rounded values)"}, _argmax),
)}
