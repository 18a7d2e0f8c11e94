"""Mutable controls of the norms: layer_norm, rms_norm, group_norm, batch_norm, l2norm.

Statistics are two-pass, each sum in accumulate.lane_sum: mean = sum(x) / N (``mean``),
var = sum((x - mean)^2) / N (``var``), rstd = rsqrt(var + eps) (``rstd``); the output
(x - mean) * rstd * w + b in fp32, cast once. The mutation rounds the statistics' accumulators and
the statistics themselves: a kernel that keeps or stores its mean / variance / rstd in fewer bits.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

from bench.power.accumulate import lane_sum
from bench.power.kernel import Args, MutableKernel, Outputs, case_dtype, f32, optional_f32
from bench.power.rounding import Mutation

MEAN = "the mean: every add of sum(x)'s lane accumulators, and sum / N"
VAR = "the variance: every add of sum((x - mean)^2)'s lane accumulators, and sum / N"
RSTD = "rsqrt(var + eps)"


def _normalize(xr: torch.Tensor, mut: Mutation, eps: float) -> torch.Tensor:
    """(x - mean) * rstd over the last dim of xr (no k dim); the result has the k dim."""
    n = xr.shape[-1]
    mean = mut(lane_sum(mut.lift(xr), mut, "mean") / n, "mean")[..., None]
    d = xr[None] - mean
    var = mut(lane_sum(d * d, mut, "var") / n, "var")[..., None]
    return d * mut(torch.rsqrt(var + eps), "rstd")


def _affine(y: torch.Tensor, w: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> torch.Tensor:
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _layer_norm(args: Args, mut: Mutation) -> Outputs:
    x = args["x"]
    y = _normalize(f32(x), mut, args["eps"])
    return [(_affine(y, optional_f32(args["weight"]), optional_f32(args["bias"])), case_dtype(args, "x"))]


def _group_norm(args: Args, mut: Mutation) -> Outputs:
    x = args["x"]
    b, c = x.shape[0], x.shape[1]
    g = int(args["num_groups"])
    y = _normalize(f32(x).reshape(b, g, -1), mut, args["eps"]).reshape((-1,) + tuple(x.shape))
    shape = (c,) + (1,) * (x.dim() - 2)
    w, bias = optional_f32(args["weight"]), optional_f32(args["bias"])
    return [(_affine(y, None if w is None else w.reshape(shape), None if bias is None else bias.reshape(shape)),
             case_dtype(args, "x"))]


def _rms_norm(args: Args, mut: Mutation) -> Outputs:
    x = args["x"]
    xf = f32(x)
    n = x.shape[-1]
    ms = mut(lane_sum(mut.lift(xf * xf), mut, "mean_square") / n, "mean_square")[..., None]
    y = xf[None] * mut(torch.rsqrt(ms + args["eps"]), "rstd")
    return [(_affine(y, optional_f32(args["weight"]), None), case_dtype(args, "x"))]


def _batch_norm(args: Args, mut: Mutation) -> Outputs:
    """PyTorch's inference form: alpha = w * rsqrt(var + eps), beta = b - mean * alpha, y = x * alpha + beta."""
    x = args["x"]
    shape = (x.shape[1],) + (1,) * (x.dim() - 2)
    mean, var = f32(args["running_mean"]), f32(args["running_var"])
    w = optional_f32(args["weight"])
    bias = optional_f32(args["bias"])
    rstd = torch.rsqrt(var + args["eps"])
    alpha = mut(rstd if w is None else w * rstd, "scale_shift", fresh=True)
    beta = mut((0.0 if bias is None else bias) - mean * alpha, "scale_shift")
    y = f32(x)[None] * alpha.reshape((-1, 1) + shape) + beta.reshape((-1, 1) + shape)  # [k, B, C, ...]
    return [(y, case_dtype(args, "x"))]


def _l2norm(args: Args, mut: Mutation) -> Outputs:
    """F.normalize: x / max(||x||, eps), the norm from a lane-accumulated sum of squares."""
    x, dim = args["x"], args["dim"]
    xf = f32(x)
    xl = xf.movedim(dim, -1)
    ss = lane_sum(mut.lift(xl * xl), mut, "sum_sq")
    norm = mut(torch.sqrt(ss), "norm")
    y = xl[None] / torch.clamp_min(norm, args["eps"])[..., None]
    return [(y.movedim(-1, (dim % x.dim()) + 1), case_dtype(args, "x"))]


KERNELS: Dict[str, MutableKernel] = {k.op: k for k in (
    MutableKernel("layer_norm", "two-pass fp32 statistics, (x - mean) * rstd * w + b",
                  {"mean": MEAN, "var": VAR, "rstd": RSTD}, _layer_norm),
    MutableKernel("group_norm", "two-pass fp32 statistics per group, (x - mean) * rstd * w + b",
                  {"mean": MEAN, "var": VAR, "rstd": RSTD}, _group_norm),
    MutableKernel("rms_norm", "fp32 throughout: x * rsqrt(mean(x^2) + eps) * w, cast once",
                  {"mean_square": "mean(x^2): every add of its lane accumulators, and sum / N",
                   "rstd": "rsqrt(mean(x^2) + eps)"},
                  _rms_norm),
    MutableKernel("batch_norm", "PyTorch's inference form x * alpha + beta in fp32",
                  {"scale_shift": "the per-channel alpha = w * rsqrt(var + eps) and beta = b - mean * alpha"},
                  _batch_norm),
    MutableKernel("l2norm", "F.normalize: x / max(||x||, eps), fp32",
                  {"sum_sq": "every add of sum(x^2)'s lane accumulators", "norm": "sqrt(sum(x^2))"}, _l2norm),
)}
