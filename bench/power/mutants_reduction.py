"""Mutable controls of the reductions and the softmax family: sum, mean, cumsum, logsumexp,
softmax, log_softmax, cross_entropy.

Row sums use accumulate.lane_sum (256 per-lane fp32 accumulators, then a tree), scans
accumulate.blocked_scan (256-wide tiles and a carry); the mutation rounds every add of the row
sums' accumulators, and the scan's running sum where it crosses from tile to tile. The softmax family
is the two-pass kernel: the row max (exact, not mutated: a rounded max used in both the numerator
and the denominator cancels), then the denominator sum of exp(x - max) in the lane accumulators
(``denominator``), then the row's log-sum-exp where the op stores one (``lse``).
"""

from __future__ import annotations

from typing import Dict

import torch

from bench.power.accumulate import blocked_scan, lane_sum, move_back, move_last
from bench.power.kernel import Args, MutableKernel, Outputs, case_dtype, f32
from bench.power.rounding import Mutation

ACC = "the row's accumulators: every add of the 256 per-lane sums and of the tree across lanes"
DENOMINATOR = ("the denominator sum of exp(x - max): every add of its per-lane accumulators and of "
               "the tree across lanes")


def _reduced(out: torch.Tensor, x: torch.Tensor, dim: int, keepdim: bool) -> torch.Tensor:
    """A row statistic [k, ...rows] back in the op's output layout."""
    return out.unsqueeze((dim % x.dim()) + 1) if keepdim else out


def _sum(args: Args, mut: Mutation) -> Outputs:
    x, dim = args["x"], args["dim"]
    s = lane_sum(mut.lift(move_last(f32(x), dim)), mut, "accumulator")
    return [(_reduced(s, x, dim, args["keepdim"]), case_dtype(args, "x"))]


def _mean(args: Args, mut: Mutation) -> Outputs:
    x, dim = args["x"], args["dim"]
    n = x.shape[dim]
    s = lane_sum(mut.lift(move_last(f32(x), dim)), mut, "accumulator")
    return [(_reduced(mut(s / n, "accumulator"), x, dim, args["keepdim"]), case_dtype(args, "x"))]


def _cumsum(args: Args, mut: Mutation) -> Outputs:
    x, dim = args["x"], args["dim"]
    y = blocked_scan(mut.lift(move_last(f32(x), dim)), mut, "accumulator")
    return [(move_back(y, dim, x.dim()), case_dtype(args, "x"))]


def _row_stats(xl: torch.Tensor, mut: Mutation):
    """(max, denominator) of each row of xl (reduced dim last, no k dim): the max exact, the
    denominator with the k dim. A row of -inf keeps max -inf and sum 0 (exp(-inf - -inf) would be
    NaN)."""
    m = xl.amax(dim=-1)
    shift = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(xl - shift[..., None])
    return m, shift, e, lane_sum(mut.lift(e), mut, "denominator")


def _softmax(args: Args, mut: Mutation) -> Outputs:
    x, dim = args["x"], args["dim"]
    _m, _shift, e, l = _row_stats(move_last(f32(x), dim), mut)
    return [(move_back(e[None] / l[..., None], dim, x.dim()), case_dtype(args, "x"))]


def _log_softmax(args: Args, mut: Mutation) -> Outputs:
    x, dim = args["x"], args["dim"]
    xl = move_last(f32(x), dim)
    _m, shift, _e, l = _row_stats(xl, mut)
    lse = mut(shift + torch.log(l), "lse")
    return [(move_back(xl[None] - lse[..., None], dim, x.dim()), case_dtype(args, "x"))]


def _logsumexp(args: Args, mut: Mutation) -> Outputs:
    x, dim = args["x"], args["dim"]
    xl = move_last(f32(x), dim)
    _m, shift, _e, l = _row_stats(xl, mut)
    lse = mut(shift + torch.log(l), "lse")
    return [(_reduced(lse, x, dim, args["keepdim"]), case_dtype(args, "x"))]


def _cross_entropy(args: Args, mut: Mutation) -> Outputs:
    """The fused loss: per row lse - x_t (label smoothing: (1 - s)(lse - x_t) + s (lse - mean_c x_c)),
    ignored rows 0; 'sum'/'mean' sum the rows in lane accumulators (mean: over the rows counted)."""
    logits, target = f32(args["logits"]), args["target"]
    s, ignore = float(args["label_smoothing"]), int(args["ignore_index"])
    _m, shift, _e, l = _row_stats(logits, mut)
    lse = mut(shift + torch.log(l), "lse")  # [k, N]
    kept = target != ignore
    xt = logits.gather(1, torch.where(kept, target, torch.zeros_like(target))[:, None])[:, 0]
    loss = lse - xt
    if s > 0:
        mean_x = lane_sum(mut.lift(logits), mut, "loss_sum") / logits.shape[1]
        loss = (1.0 - s) * loss + s * (lse - mean_x)
    loss = torch.where(kept, loss, torch.zeros_like(loss))
    if args["reduction"] == "none":
        return [(loss, case_dtype(args, "logits"))]
    total = lane_sum(loss, mut, "loss_sum")
    if args["reduction"] == "mean":
        total = total / kept.sum().to(torch.float32)
    return [(total, case_dtype(args, "logits"))]


KERNELS: Dict[str, MutableKernel] = {k.op: k for k in (
    MutableKernel("sum", "per-lane fp32 accumulators, tree across lanes", {"accumulator": ACC}, _sum),
    MutableKernel("mean", "per-lane fp32 accumulators, tree across lanes, / N",
                  {"accumulator": ACC + ", and the division by N"}, _mean),
    MutableKernel("cumsum", "blocked scan: each 256-wide tile scanned in fp32, plus the carry of the tiles before",
                  {"accumulator": "carry + the tile's local prefix (each output, and the carry it passes on)"},
                  _cumsum),
    MutableKernel("softmax", "two-pass: row max, lane-accumulated sum of exp(x - max), exp(x - max) / sum",
                  {"denominator": DENOMINATOR}, _softmax),
    MutableKernel("log_softmax", "two-pass: row max, lane-accumulated sum of exp(x - max), x - lse",
                  {"denominator": DENOMINATOR, "lse": "the row's log-sum-exp max + log(sum) (a stored statistic)"},
                  _log_softmax),
    MutableKernel("logsumexp", "row max, lane-accumulated sum of exp(x - max), max + log(sum)",
                  {"denominator": DENOMINATOR, "lse": "the result max + log(sum) before the store"},
                  _logsumexp),
    MutableKernel("cross_entropy", "fused: per row lse - x_t (+ smoothing), rows summed in lane accumulators",
                  {"denominator": DENOMINATOR, "lse": "each row's log-sum-exp",
                   "loss_sum": "the sums over rows ('sum', 'mean') and over classes (label smoothing's mean logit)"},
                  _cross_entropy),
)}
