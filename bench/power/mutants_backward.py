"""Mutable controls of the backward ops: softmax_backward, log_softmax_backward, rms_norm_backward,
layer_norm_backward (its row sums c1 and c2, grad_weight's and grad_bias's sums over the rows),
silu_backward, swiglu_backward, gelu_backward, matmul_backward and linear_backward (their GEMMs as
mutants_gemm's K loop; linear's grad_bias a lane sum over the rows), embedding_backward (grad_weight's
sums over the positions naming each row, in tiles of sorted positions), rope_backward (rope's own
mutable control on the gradient with each pair's second member negated before and after: the
inverse rotation), cross_entropy_backward (the fused k (p - q) with softmax's lane-accumulated
denominator, mutants_reduction's), flash_attention_backward (FA2's backward: its dV, dQ and dK GEMMs as K loops).

Each is the fp32 backward a Triton kernel writes, with its row sums in accumulate.lane_sum (256
per-lane fp32 accumulators, then a tree): softmax's sum(g * y) and log_softmax's sum(g)
(``row_sum``), rms_norm's sum(w * g * x_hat) over the row (``row_sum``) and grad_weight's sum of
g * x_hat over the rows (``dweight_sum``, the reduction the issue names: a bf16 accumulator there is
the bug class). The mutation rounds every add of those accumulators. silu's and swiglu's derivative
s * (1 + x * (1 - s)) is mutated where it is formed (``derivative``: a derivative held in fewer bits),
and so is gelu's (cdf + x * pdf, or the tanh form's two terms, per ``approximate``).
"""

from __future__ import annotations

import math
from typing import Dict

import torch

from bench.power import mutants_elementwise, mutants_reduction
from bench.power.accumulate import k_loop, lane_sum, move_back, move_last
from bench.power.mutants_attention import _heads, _scale
from bench.power.kernel import Args, MutableKernel, Outputs, case_dtype, f32
from bench.power.rounding import Mutation

ROW_SUM = "the row sum: every add of its per-lane accumulators and of the tree across lanes"


def _softmax_backward(args: Args, mut: Mutation) -> Outputs:
    dim = args["dim"]
    g, y = move_last(f32(args["grad_out"]), dim), move_last(f32(args["y"]), dim)
    s = lane_sum(mut.lift(g * y), mut, "row_sum")
    out = y[None] * (g[None] - s[..., None])
    return [(move_back(out, dim, g.dim()), case_dtype(args, "grad_out"))]


def _log_softmax_backward(args: Args, mut: Mutation) -> Outputs:
    dim = args["dim"]
    g, y = move_last(f32(args["grad_out"]), dim), move_last(f32(args["y"]), dim)
    s = lane_sum(mut.lift(g), mut, "row_sum")
    out = g[None] - torch.exp(y)[None] * s[..., None]
    return [(move_back(out, dim, g.dim()), case_dtype(args, "grad_out"))]


def _rms_norm_backward(args: Args, mut: Mutation) -> Outputs:
    g, x, w = f32(args["grad_out"]), f32(args["x"]), f32(args["weight"])
    rstd = f32(args["rstd"])[:, None]
    xh, wg = x * rstd, w * g
    c = lane_sum(mut.lift(wg * xh), mut, "row_sum") / x.shape[-1]
    gx = rstd[None] * (wg[None] - xh[None] * c[..., None])
    gw = lane_sum(mut.lift((g * xh).t()), mut, "dweight_sum")
    return [(gx, case_dtype(args, "x")), (gw, case_dtype(args, "weight"))]


def _layer_norm_backward(args: Args, mut: Mutation) -> Outputs:
    """Triton's layer_norm backward with the saved mean and rstd: the row sums c1 = sum(w*g*x_hat)
    and c2 = sum(w*g) in lane accumulators (``row_sum``), grad_weight's and grad_bias's sums over
    the rows likewise (``dweight_sum``, ``dbias_sum``). Without a weight only grad_x is returned (the
    column sums still run, with w = 1, so that every site is reached whatever the case holds)."""
    g, x = f32(args["grad_out"]), f32(args["x"])
    w = f32(args["weight"]) if args.get("weight") is not None else torch.ones(x.shape[-1])
    n = x.shape[-1]
    xh = (x - f32(args["mean"])[:, None]) * f32(args["rstd"])[:, None]
    wg = w * g
    c1 = lane_sum(mut.lift(wg * xh), mut, "row_sum") / n
    c2 = lane_sum(mut.lift(wg), mut, "row_sum") / n
    gx = f32(args["rstd"])[None, :, None] * (wg[None] - (xh[None] * c1[..., None] + c2[..., None]))
    gw = lane_sum(mut.lift((g * xh).t()), mut, "dweight_sum")
    gb = lane_sum(mut.lift(g.t()), mut, "dbias_sum")
    if args.get("weight") is None:
        return [(gx, case_dtype(args, "x"))]
    return [(gx, case_dtype(args, "x")), (gw, case_dtype(args, "weight")), (gb, case_dtype(args, "weight"))]


def _silu_prime(x: torch.Tensor, mut: Mutation) -> torch.Tensor:
    s = torch.sigmoid(x)
    return mut(s * (1.0 + x * (1.0 - s)), "derivative", fresh=True)


def _silu_backward(args: Args, mut: Mutation) -> Outputs:
    g, x = f32(args["grad_out"]), f32(args["x"])
    return [(g[None] * _silu_prime(x, mut), case_dtype(args, "x"))]


def _swiglu_backward(args: Args, mut: Mutation) -> Outputs:
    g, gate, up = f32(args["grad_out"]), f32(args["gate"]), f32(args["up"])
    d = _silu_prime(gate, mut)
    return [((g * up)[None] * d, case_dtype(args, "gate")),
            ((g * torch.nn.functional.silu(gate))[None], case_dtype(args, "up"))]


def _gelu_backward(args: Args, mut: Mutation) -> Outputs:
    g, x = f32(args["grad_out"]), f32(args["x"])
    if args["approximate"] == "tanh":
        k = math.sqrt(2.0 / math.pi)
        t = torch.tanh(k * (x + 0.044715 * x * x * x))
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (k * (1.0 + 3.0 * 0.044715 * x * x))
    else:
        d = 0.5 * (1.0 + torch.erf(x * math.sqrt(0.5))) + x * (torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi))
    return [(g[None] * mut(d, "derivative", fresh=True), case_dtype(args, "x"))]


def _matmul_backward(args: Args, mut: Mutation) -> Outputs:
    """Both gradients as mutants_gemm's K loop (32-wide tiles, ``acc += tile`` rounded)."""
    g, a, b = f32(args["grad_out"]), f32(args["a"]), f32(args["b"])
    ga = k_loop(g, b.t(), mut, "accumulator", "operands")
    gb = k_loop(a.t(), g, mut, "accumulator", "operands")
    return [(ga, case_dtype(args, "a")), (gb, case_dtype(args, "b"))]


def _linear_backward(args: Args, mut: Mutation) -> Outputs:
    """grad_x = g @ W and grad_weight = g^T @ x as K loops, grad_bias = g summed over the rows in
    lane accumulators (``bias_sum``: the reduction the issue names, a bf16 accumulator there is the
    bug class)."""
    g, x, w = f32(args["grad_out"]), f32(args["x"]), f32(args["weight"])
    gx = k_loop(g, w, mut, "accumulator", "operands")
    gw = k_loop(g.t(), x, mut, "accumulator", "operands")
    gb = lane_sum(mut.lift(g.t()), mut, "bias_sum")
    return [(gx, case_dtype(args, "x")), (gw, case_dtype(args, "weight")), (gb, case_dtype(args, "x"))]


def _embedding_backward(args: Args, mut: Mutation) -> Outputs:
    """Positions sorted by index, in tiles of 1024: each tile's per-row partials summed in fp32
    (index_add_) and added to grad_weight's accumulator (``accumulator``: every such add)."""
    g = f32(args["grad_out"])
    d = g.shape[-1]
    idx = args["indices"].reshape(-1).long()
    order = torch.argsort(idx, stable=True)
    rows, inv = torch.unique(idx, return_inverse=True)
    gs, ins = g.reshape(-1, d)[order], inv[order]
    acc = None
    for s in range(0, idx.numel(), 1024):
        part = mut.lift(torch.zeros(rows.numel(), d).index_add_(0, ins[s:s + 1024], gs[s:s + 1024]))
        acc = mut(part, "accumulator") if acc is None else mut(acc + part, "accumulator", temporary=True)
    out = torch.zeros((acc.shape[0], args["num_weights"], d))
    out[:, rows] = acc
    return [(out, case_dtype(args, "grad_out"))]


def _cross_entropy_backward(args: Args, mut: Mutation) -> Outputs:
    """The fused backward (Liger's, Apex's): per row p = exp(x - max) / l with l in lane accumulators
    (mutants_reduction's softmax denominator), k (p - q) (k per row for reduction 'none'), ignored rows 0."""
    logits, target = f32(args["logits"]), args["target"]
    s, ignore, C = float(args["label_smoothing"]), int(args["ignore_index"]), args["logits"].shape[-1]
    _m, _shift, e, l = mutants_reduction._row_stats(logits, mut)
    kept = target != ignore
    q = torch.full_like(logits, s / C)
    rows = kept.nonzero()[:, 0]
    q[rows, target[rows]] += 1.0 - s
    n = kept.sum().to(torch.float32) if args["reduction"] == "mean" else torch.tensor(1.0)
    k = f32(args["grad_out"]) / n
    if args["reduction"] == "none":
        k = k[:, None]  # one upstream gradient per row
    out = k * (e[None] / l[..., None] - q[None]) * kept[None, :, None]
    return [(out, case_dtype(args, "logits"))]


def _rope_backward(args: Args, mut: Mutation) -> Outputs:
    g = args["grad_out"]
    d = g.shape[-1]
    sign = torch.ones(d)
    sign[slice(1, None, 2) if args["style"] == "interleaved" else slice(d // 2, d)] = -1.0
    [(out, dt)] = mutants_elementwise._rope({**args, "x": (f32(g) * sign).to(g.dtype)}, mut)
    return [(out * sign, dt)]


def _flash_attention_backward(args: Args, mut: Mutation) -> Outputs:
    """FlashAttention-2's backward in fp32 with the saved out and lse: P = exp(s - lse) rounded to the
    input dtype before dV = P^T dO, dS = P (dO V^T - rowsum(dO * out)) rounded to the input dtype
    before dQ = scale dS K and dK = scale dS^T Q; the three GEMMs as K loops over 32-wide tiles
    (``accumulator``: every acc += tile); grad_k and grad_v summed over each GQA group."""
    q, g, o, lse = f32(args["q"]), f32(args["grad_out"]), f32(args["out"]), f32(args["lse"])
    in_dt = args["q"].dtype
    h, hkv, lq, d = q.shape[-3], args["k"].shape[-3], q.shape[-2], q.shape[-1]
    k, v = _heads(f32(args["k"]), h, -3), _heads(f32(args["v"]), h, -3)
    sc = _scale(args, d)
    s = (q @ k.transpose(-1, -2)) * sc
    if args.get("causal"):
        s = s.masked_fill(torch.ones(lq, k.shape[-2], dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(s - lse[..., None])
    ds = p * (g @ v.transpose(-1, -2) - (g * o).sum(-1, keepdim=True))
    p_in, ds_in = p.to(in_dt).float(), ds.to(in_dt).float()
    dv = k_loop(p_in.transpose(-1, -2), g, mut, "accumulator")
    dq = k_loop(ds_in, k, mut, "accumulator") * sc
    dk = k_loop(ds_in.transpose(-1, -2), q, mut, "accumulator") * sc
    if h != hkv:
        dk = dk.unflatten(-3, (hkv, h // hkv)).sum(-3)
        dv = dv.unflatten(-3, (hkv, h // hkv)).sum(-3)
    dt = case_dtype(args, "q")
    return [(dq, dt), (dk, dt), (dv, dt)]


KERNELS: Dict[str, MutableKernel] = {k.op: k for k in (
    MutableKernel("softmax_backward", "y * (g - s), s = sum(g * y) in lane accumulators", {"row_sum": ROW_SUM},
                  _softmax_backward),
    MutableKernel("log_softmax_backward", "g - exp(y) * S, S = sum(g) in lane accumulators", {"row_sum": ROW_SUM},
                  _log_softmax_backward),
    MutableKernel("rms_norm_backward",
                  "rstd * (w*g - x_hat * mean(w*g*x_hat)) with the saved rstd; grad_weight = sum over rows of g * x_hat",
                  {"row_sum": ROW_SUM,
                   "dweight_sum": "grad_weight's sum over the rows: every add of its per-lane accumulators and of the tree"},
                  _rms_norm_backward),
    MutableKernel("layer_norm_backward",
                  "(w*g - (x_hat * c1 + c2)) * rstd with the saved mean and rstd; grad_weight and grad_bias summed over rows",
                  {"row_sum": ROW_SUM + " (c1 = sum(w*g*x_hat) and c2 = sum(w*g))",
                   "dweight_sum": "grad_weight's sum over the rows: every add of its per-lane accumulators and of the tree",
                   "dbias_sum": "grad_bias's sum over the rows: every add of its per-lane accumulators and of the tree"},
                  _layer_norm_backward),
    MutableKernel("matmul_backward", "grad_out @ b^T and a^T @ grad_out, each a K loop over 32-wide tiles",
                  {"accumulator": "acc += tile in both backward GEMMs", "operands": "their operands before the products"},
                  _matmul_backward),
    MutableKernel("embedding_backward", "grad_weight[v] = sum of grad_out over the positions naming v, sorted, in tiles",
                  {"accumulator": "grad_weight's accumulator: every add of a tile's partials"}, _embedding_backward),
    MutableKernel("cross_entropy_backward", "fused: k (exp(x - max) / l - q) per row, l in lane accumulators",
                  {"denominator": mutants_reduction.DENOMINATOR}, _cross_entropy_backward),
    MutableKernel("rope_backward", "S rope(S grad_out), S negating each pair's second member: rope's fp32 control",
                  {"angles": "the fp32 angles (positions x inv_freq) before cos/sin",
                   "result": "the rotated fp32 values before the cast"}, _rope_backward),
    MutableKernel("gelu_backward", "g * gelu'(x) in fp32, torch's formulas (erf or tanh form per `approximate`)",
                  {"derivative": "gelu'(x) as formed"}, _gelu_backward),
    MutableKernel("linear_backward", "g @ W and g^T @ x as K loops over 32-wide tiles, grad_bias in lane accumulators",
                  {"accumulator": "acc += tile in both GEMMs", "operands": "their operands before the products",
                   "bias_sum": "grad_bias's sum over the rows: every add of its per-lane accumulators and of the tree"},
                  _linear_backward),
    MutableKernel("silu_backward", "g * s * (1 + x * (1 - s)) in fp32",
                  {"derivative": "silu'(x) = s * (1 + x * (1 - s)) as formed"}, _silu_backward),
    MutableKernel("flash_attention_backward",
                  "FA2's backward in fp32: P = exp(s - lse) and dS rounded to the input dtype before the GEMMs, "
                  "dV, dQ, dK as K loops over 32-wide tiles",
                  {"accumulator": "acc += tile in the dV, dQ and dK GEMMs"}, _flash_attention_backward,
                  work=lambda a: int(a["q"].numel() // max(a["q"].shape[-1], 1)) * (a["k"].shape[-2] + a["q"].shape[-1])),
    MutableKernel("swiglu_backward", "grad_gate = g * up * silu'(gate), grad_up = g * silu(gate), in fp32",
                  {"derivative": "silu'(gate) as formed"}, _swiglu_backward),
)}
