#!/usr/bin/env python3
"""Formulation mutants (issue 47): kernels that are right in exact arithmetic and wrong in floating
point, because their formula cancels, overflows or underflows where a careful one does not.

    .venv/bin/python -m bench.power.formulations --seeds 20 --cases 100 --out evidence/power/formulations
    .venv/bin/python -m bench.power.formulations --mutants layer_norm.one_pass_variance --dtypes bfloat16 --seeds 2

Each mutant reads the case's inputs in their dtype, computes in fp32 as a real kernel would (the
inputs upcast, every intermediate fp32, the output rounded once to the op's output dtype), and is
judged against the fp64 reference of the case, on the cases ``gpuemu fuzz --seed S`` draws with
the defaults (adversarial, layouts on, the attrs with schema values varied: bench/power/measure.py's
protocol). A run is one (mutant, dtype, master seed): cases 0..``--cases``-1, stopping at the first
failure (its index is what the run records). The report gives, per mutant and dtype, how many of
the master seeds caught it and the median index of the first failure over the runs that did.

``EXCEPTIONS`` lists, for every other catalogue op, why no formulation mutant is measured: no
cancelling formulation exists, or the one a kernel might use is what a trusted implementation
(PyTorch) itself computes, so the error model must admit it (the arithmetic is in the entry), or
the work is not done. ``INVISIBLE`` lists (mutant, dtype) pairs no input of that dtype makes
visible, with the arithmetic.

``--control`` also judges the op's correct fp32 control (bench/power/mutants_*.py at k = 1) on
every case of the run (no early stop then): a control failure is a false positive of the model on
the cases the generator draws, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from bench.power.kernel import Args, case_dtype, f32, optional_f32

MASTER_SEED_BASE = 20261201  # master seed i is MASTER_SEED_BASE + i (power_curve.py's)
DETECTION_RATE = 0.95


@dataclass(frozen=True)
class Formulation:
    """``fn(args) -> [(fp32 tensor, output dtype)]``: one output per op output, without a k dim."""

    op: str
    name: str
    describe: str
    fn: Callable[[Args], List[Tuple[torch.Tensor, str]]]

    @property
    def key(self) -> str:
        return f"{self.op}.{self.name}"


# --- norms -------------------------------------------------------------------------------------

def _one_pass_normalize(xr: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) * rsqrt(E[x^2] - E[x]^2 + eps) over the last dim: sum(x) and sum(x^2) in one fp32
    pass (torch's fp32 sum), the variance clamped at 0 as such kernels do."""
    n = xr.shape[-1]
    mean = xr.sum(-1, keepdim=True) / n
    ex2 = (xr * xr).sum(-1, keepdim=True) / n
    var = torch.clamp_min(ex2 - mean * mean, 0.0)
    return (xr - mean) * torch.rsqrt(var + eps)


def _layer_norm_one_pass(a: Args):
    x = a["x"]
    y = _one_pass_normalize(f32(x), a["eps"])
    w, b = optional_f32(a["weight"]), optional_f32(a["bias"])
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return [(y, case_dtype(a, "x"))]


def _group_norm_one_pass(a: Args):
    x = a["x"]
    bsz, c = x.shape[0], x.shape[1]
    g = int(a["num_groups"])
    y = _one_pass_normalize(f32(x).reshape(bsz, g, -1), a["eps"]).reshape(x.shape)
    shape = (c,) + (1,) * (x.dim() - 2)
    w, b = optional_f32(a["weight"]), optional_f32(a["bias"])
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return [(y, case_dtype(a, "x"))]


# --- softmax family ----------------------------------------------------------------------------

def _softmax_no_max(a: Args):
    """exp(x) / sum(exp(x)): the sum taken before (without) the row max."""
    x = f32(a["x"])
    e = torch.exp(x)
    return [(e / e.sum(a["dim"], keepdim=True), case_dtype(a, "x"))]


def _softmax_exp_minus_lse(a: Args):
    """exp(x - lse) with lse = max + log(sum(exp(x - max))) stored in fp32 (a kernel that keeps the
    row's log-sum-exp, as a fused forward does, and normalises by it)."""
    x = f32(a["x"])
    d = a["dim"]
    m = x.amax(d, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    lse = m + torch.log(torch.exp(x - m).sum(d, keepdim=True))
    return [(torch.exp(x - lse), case_dtype(a, "x"))]


def _log_softmax_no_max(a: Args):
    x = f32(a["x"])
    return [(x - torch.log(torch.exp(x).sum(a["dim"], keepdim=True)), case_dtype(a, "x"))]


def _log_softmax_log_of_softmax(a: Args):
    """log(softmax(x)): a correct fp32 softmax (max subtracted), then its log."""
    x = f32(a["x"])
    return [(torch.log(torch.softmax(x, a["dim"])), case_dtype(a, "x"))]


def _logsumexp_no_max(a: Args):
    x = f32(a["x"])
    return [(torch.log(torch.exp(x).sum(a["dim"], keepdim=bool(a["keepdim"]))), case_dtype(a, "x"))]


def _ce_from_row_losses(a: Args, per_row: torch.Tensor, logits: torch.Tensor, logp: Optional[torch.Tensor]):
    """cross_entropy's reduction over the rows' losses, label smoothing with mean(-log p) when given."""
    target, s, ignore = a["target"], float(a["label_smoothing"]), int(a["ignore_index"])
    kept = target != ignore
    loss = per_row
    if s > 0:
        smooth = -logp.mean(1) if logp is not None else None
        loss = (1.0 - s) * loss + s * smooth
    loss = torch.where(kept, loss, torch.zeros_like(loss))
    if a["reduction"] == "none":
        return [(loss, case_dtype(a, "logits"))]
    total = loss.sum()
    if a["reduction"] == "mean":
        total = total / kept.sum().to(torch.float32)
    return [(total, case_dtype(a, "logits"))]


def _ce_gather(logp_or_x: torch.Tensor, a: Args) -> torch.Tensor:
    target, ignore = a["target"], int(a["ignore_index"])
    kept = target != ignore
    return logp_or_x.gather(1, torch.where(kept, target, torch.zeros_like(target))[:, None])[:, 0]


def _ce_no_max(a: Args):
    """lse - x_t with lse = log(sum(exp(x))) taken without the row max."""
    x = f32(a["logits"])
    logp = x - torch.log(torch.exp(x).sum(1, keepdim=True))
    return _ce_from_row_losses(a, -_ce_gather(logp, a), x, logp)


def _ce_log_of_softmax(a: Args):
    """-log(softmax(x)[target]): a correct fp32 softmax, then the log of the target's probability."""
    x = f32(a["logits"])
    logp = torch.log(torch.softmax(x, 1))
    return _ce_from_row_losses(a, -_ce_gather(logp, a), x, logp)


# --- scans -------------------------------------------------------------------------------------

def _cumsum_total_minus_suffix(a: Args):
    """out_i = total - sum_{j > i} x_j: a reversed scan subtracted from the line's total (a kernel
    that derives the prefix from a suffix scan it already has)."""
    x = f32(a["x"])
    d = a["dim"]
    total = x.sum(d, keepdim=True)
    suffix_incl = torch.flip(torch.cumsum(torch.flip(x, [d]), d), [d])
    return [(total - suffix_incl + x, case_dtype(a, "x"))]


def _cumsum_block_total_minus_suffix(a: Args, block: int = 256):
    """A blocked scan whose tile prefix is the tile's total minus its suffix: carry + (tile total -
    suffix within the tile) + x (each tile's cancellation bounded by the tile)."""
    x = f32(a["x"])
    d = a["dim"] % x.dim()
    xm = x.movedim(d, -1)
    outs, carry = [], torch.zeros(xm.shape[:-1])
    for s in range(0, xm.shape[-1], block):
        t = xm[..., s:s + block]
        tot = t.sum(-1, keepdim=True)
        suf = torch.flip(torch.cumsum(torch.flip(t, [-1]), -1), [-1])
        blk = carry[..., None] + (tot - suf + t)
        outs.append(blk)
        carry = blk[..., -1]
    y = torch.cat(outs, -1) if outs else xm
    return [(y.movedim(-1, d), case_dtype(a, "x"))]


# --- elementwise -------------------------------------------------------------------------------

def _sigmoid_one_minus(a: Args):
    x = f32(a["x"])
    return [(1.0 - torch.sigmoid(-x), case_dtype(a, "x"))]


def _sigmoid_exp_ratio(a: Args):
    """exp(x) / (1 + exp(x)): overflows to Inf / Inf for x > 88.7."""
    e = torch.exp(f32(a["x"]))
    return [(e / (1.0 + e), case_dtype(a, "x"))]


def _softplus_log_one_plus_exp(a: Args):
    """log(1 + exp(beta x)) / beta (no log1p), with the op's threshold."""
    x = f32(a["x"])
    beta, thr = float(a["beta"]), float(a["threshold"])
    bx = x * beta
    return [(torch.where(bx > thr, x, torch.log(1.0 + torch.exp(bx)) / beta), case_dtype(a, "x"))]


def _elu_exp_minus_one(a: Args):
    """alpha (exp(x) - 1) for x <= 0 (no expm1): PyTorch's own (EXCEPTIONS), kept for the record."""
    x = f32(a["x"])
    alpha = float(a["alpha"])
    return [(torch.where(x > 0, x, alpha * (torch.exp(x) - 1.0)), case_dtype(a, "x"))]


def _tanh_exp_ratio(a: Args):
    """(exp(2x) - 1) / (exp(2x) + 1): cancels for small |x| and overflows for x > 44."""
    e = torch.exp(2.0 * f32(a["x"]))
    return [((e - 1.0) / (e + 1.0), case_dtype(a, "x"))]


def _tanh_two_sigmoid(a: Args):
    """2 sigmoid(2x) - 1: cancels for small |x|."""
    return [(2.0 * torch.sigmoid(2.0 * f32(a["x"])) - 1.0, case_dtype(a, "x"))]


def _silu_one_minus(a: Args):
    """x * (1 - sigmoid(-x))."""
    x = f32(a["x"])
    return [(x * (1.0 - torch.sigmoid(-x)), case_dtype(a, "x"))]


# --- attention ---------------------------------------------------------------------------------

def _attention_probs_no_max(s: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    e = torch.exp(s)
    if mask is not None:
        e = e.masked_fill(mask, 0.0)
    return e / e.sum(-1, keepdim=True)


def _flash_no_max(a: Args):
    """softmax(q k^T scale) v with exp(s) / sum(exp(s)): no running max."""
    from bench.power.mutants_attention import _heads, _scale

    q = a["q"]
    h, lq, d = q.shape[-3], q.shape[-2], q.shape[-1]
    k, v = _heads(f32(a["k"]), h, -3), _heads(f32(a["v"]), h, -3)
    s = (f32(q) @ k.transpose(-1, -2)) * _scale(a, d)
    mask = None
    if a.get("causal"):
        mask = torch.arange(k.shape[-2])[None, :] > torch.arange(lq)[:, None]
    p = _attention_probs_no_max(s, mask)
    return [(p.to(q.dtype).to(torch.float32) @ v, case_dtype(a, "q"))]


def _decode_no_max(a: Args):
    from bench.power.mutants_attention import _heads, _scale

    q = a["q"]
    h, d = q.shape[1], q.shape[2]
    kc, vc = _heads(f32(a["k_cache"]), h, 1), _heads(f32(a["v_cache"]), h, 1)
    s = (f32(q)[:, :, None, :] @ kc.transpose(-1, -2)) * _scale(a, d)  # [B, H, 1, L]
    lens = a["seq_lens"].long()
    mask = (torch.arange(kc.shape[-2])[None, :] >= lens[:, None])[:, None, None, :]
    p = _attention_probs_no_max(s, mask)
    return [((p.to(q.dtype).to(torch.float32) @ vc)[..., 0, :], case_dtype(a, "q"))]


FORMULATIONS: Dict[str, Formulation] = {f.key: f for f in (
    Formulation("layer_norm", "one_pass_variance", "var = E[x^2] - E[x]^2 in one fp32 pass (clamped at 0)",
                _layer_norm_one_pass),
    Formulation("group_norm", "one_pass_variance", "var = E[x^2] - E[x]^2 per group in one fp32 pass (clamped at 0)",
                _group_norm_one_pass),
    Formulation("softmax", "no_max", "exp(x) / sum(exp(x)), no max subtracted", _softmax_no_max),
    Formulation("softmax", "exp_minus_lse", "exp(x - lse), lse = max + log(sum(exp(x - max))) kept in fp32",
                _softmax_exp_minus_lse),
    Formulation("log_softmax", "no_max", "x - log(sum(exp(x))), no max subtracted", _log_softmax_no_max),
    Formulation("log_softmax", "log_of_softmax", "log(softmax(x)), softmax correct in fp32",
                _log_softmax_log_of_softmax),
    Formulation("logsumexp", "no_max", "log(sum(exp(x))), no max subtracted", _logsumexp_no_max),
    Formulation("cross_entropy", "no_max", "log(sum(exp(x))) - x_t, no max subtracted", _ce_no_max),
    Formulation("cross_entropy", "log_of_softmax", "-log(softmax(x)[t]), softmax correct in fp32",
                _ce_log_of_softmax),
    Formulation("cumsum", "total_minus_suffix", "out_i = total - sum_{j>i} x_j over the whole line",
                _cumsum_total_minus_suffix),
    Formulation("cumsum", "tile_total_minus_suffix", "a 256-wide blocked scan, each tile's prefix as tile "
                "total minus its suffix, an fp32 carry", _cumsum_block_total_minus_suffix),
    Formulation("sigmoid", "one_minus", "1 - sigmoid(-x)", _sigmoid_one_minus),
    Formulation("sigmoid", "exp_ratio", "exp(x) / (1 + exp(x))", _sigmoid_exp_ratio),
    Formulation("softplus", "log_one_plus_exp", "log(1 + exp(beta x)) / beta, no log1p", _softplus_log_one_plus_exp),
    Formulation("tanh", "exp_ratio", "(exp(2x) - 1) / (exp(2x) + 1)", _tanh_exp_ratio),
    Formulation("tanh", "two_sigmoid", "2 sigmoid(2x) - 1", _tanh_two_sigmoid),
    Formulation("silu", "one_minus", "x (1 - sigmoid(-x))", _silu_one_minus),
    Formulation("flash_attention", "no_max", "exp(s) / sum(exp(s)) over the scores, no running max", _flash_no_max),
    Formulation("decode_attention", "no_max", "exp(s) / sum(exp(s)) over the cache, no running max", _decode_no_max),
)}

# (mutant, dtype) pairs that no input of the dtype makes visible: why, with the arithmetic.
# evidence/power/formulations/fp16_exhaustive.py evaluates each on every finite float16 input.
_FP16_ONE_MINUS = ("the fp32 quantum of a value just below 1 is 2^-24, so 1 - s loses at most 2^-25 "
                   "absolutely; a float16 output y >= 2^-14 (its smallest normal) has an ulp >= 2^-24, and "
                   "below 2^-14 the floor is the smallest normal (a correct kernel may flush): the loss is at "
                   "most half an output ulp. Over every finite float16 input the worst error is {worst} of the "
                   "envelope's 2")
INVISIBLE: Dict[Tuple[str, str], str] = {
    ("sigmoid.one_minus", "float16"): _FP16_ONE_MINUS.format(worst="1.00"),
    ("softplus.log_one_plus_exp", "float16"): _FP16_ONE_MINUS.replace("1 - s", "1 + e^x").format(
        worst="1.20 (beta 0.5, 1, 2)"),
    ("tanh.two_sigmoid", "float16"): ("2 sigmoid(2x) - 1 near x = 0 loses about 2^-25 (sigmoid's fp32 rounding "
                                      "near 0.5, doubled); tanh(x) = x is a float16 normal only from 2^-14, "
                                      "whose ulp is 2^-24: at most half an output ulp. Over every finite float16 "
                                      "input the worst error is 0.99 of the envelope's 2"),
}

# Every other catalogue op: why no formulation mutant is measured for it.
_ORDER = ("its only freedom is the fp32 summation order (blocked, tree, split, sequential), which the "
          "bound's G(N) growth admits and the precision mutants of power_curve.py already measure")
EXCEPTIONS: Dict[str, str] = {
    "sum": "no cancelling formulation: " + _ORDER,
    "mean": "no cancelling formulation: sum / N or a sum of x / N; " + _ORDER,
    "amax": "exact: a max rounds nothing, every formulation returns one of the inputs",
    "argmax": "exact: an index of the max, no arithmetic",
    "relu": "exact: max(x, 0)",
    "leaky_relu": "one product, no cancellation",
    "embedding": "exact: a gather",
    "exp": "no cancellation; exp2(x log2 e)'s argument rounding (u |x| relative) is in the bound (|x f'(x)|)",
    "log": "no cancellation in the op (log1p is another op); the fp32 log's relative error is admitted",
    "sqrt": "one correctly rounded operation",
    "rsqrt": "1/sqrt(x) or rsqrt(x): two roundings at most, no cancellation",
    "elu": ("PyTorch's CPU formula is alpha (exp(x) - 1) (not expm1), so the bound must admit it: ref_elu's "
            "term |alpha| e^x carries exp's rounding through the cancellation near 0 (an expm1 kernel passes "
            "with room). Measured: the mutant alpha (exp(x) - 1) passed 20 of 20 seeds in every dtype"),
    "gelu": ("PyTorch computes both forms as written, x 0.5 (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh(...)), "
             "and both cancel for x << 0 (1 + erf -> 0): the bound admits it through gelu's 8 * 0.5 |x| term "
             "(erf's absolute error times 0.5 |x|). A kernel can only do better (erfc)"),
    "swiglu": "silu(gate) * up: silu's formulations (silu.one_minus) times one product",
    "geglu": "gelu(gate) * up: gelu's formulations are PyTorch's own (see gelu)",
    "add": "one rounding", "mul": "one rounding",
    "fp8_quantize": "one division and one rounding to e4m3",
    "rms_norm": ("no cancellation: every term of sum(x^2) is >= 0 (condition 1), so any fp32 order or form "
                 "(sqrt(mean x^2), ||x|| / sqrt N, a Welford-like running mean) is within the bound's G(N)"),
    "l2norm": "no cancellation: sum(x^2) of non-negative terms, as rms_norm",
    "batch_norm": ("inference: no statistic is computed (running_mean and running_var are inputs). The "
                   "cancelling form x * alpha + beta, beta = b - mean * alpha, is PyTorch's own CPU kernel (the "
                   "power harness's control), and x * alpha - mean * alpha cancels as (x - mean) * alpha does "
                   "not; the bound must admit it (tests/python/test_cuda_formulations.py covers CUDA's form)"),
    "matmul": ("no real cancelling formulation: a GEMM's freedom is its K order, split-K and operand "
               "precision (power_curve.py's k_loop mutants, the cancelling dot products of draw_jointly); "
               "Strassen-like schemes are not used by the kernels users trust"),
    "bmm": "as matmul", "linear": "as matmul",
    "scaled_fp8_matmul": "as matmul, over e4m3 operands",
    "conv1d": ("as matmul (im2col / implicit GEMM). Winograd / FFT convolutions (cuDNN's) change the error "
               "and are not emulated here: left undone"),
    "conv2d": "as conv1d",
    "rope": ("the angle (offset + l) * theta^(-2i/D) in fp32 loses u |phi| at long positions: every trusted "
             "implementation computes it so, and rope's bound holds |phi| for it"),
    "rope_backward": "as rope",
    "softmax_backward": ("y (g - sum(g y)) and y g - y sum(g y) both cancel for constant g; the bound admits "
                         "both (|y| (|g| + |s|)), since both are how trusted kernels write it"),
    "log_softmax_backward": "g - exp(y) sum(g): the form every implementation uses (the bound holds exp's argument)",
    "layer_norm_backward": "not measured here: its formulations (a recomputed rstd, c1/c2 orders) are in the bound; left undone",
    "rms_norm_backward": "not measured here (as layer_norm_backward); left undone",
    "gelu_backward": "PyTorch's two formulas as written (the bound follows them); not measured here",
    "silu_backward": "s (1 + x (1 - s)), PyTorch's; not measured here",
    "swiglu_backward": "as silu_backward",
    "cross_entropy_backward": "k (softmax - q): the softmax family's forms; not measured here",
    "flash_attention_backward": ("P = exp(s - lse) from the saved lse is FlashAttention-2's own formulation and "
                                 "the bound admits it (delta P); not measured here"),
    "matmul_backward": "as matmul", "linear_backward": "as matmul", "embedding_backward": "sum's (order only)",
}


# --- the measurement ---------------------------------------------------------------------------

def output_arrays(outs: List[Tuple[torch.Tensor, str]]):
    from bench.power.measure import output_arrays as convert

    return [convert(t.unsqueeze(0), dt)[0] for t, dt in outs]


def measure_run(op: str, keys: Sequence[str], dtype: str, seed: int, cases: int, strategy: str = "adversarial",
                control: bool = False, engine: Any = None) -> Dict[str, Any]:
    """The cases of one master seed for one (op, dtype), each judged for every mutant of ``keys``
    not yet caught; stops once each is caught (unless ``control``)."""
    import gpuemu
    from gpuemu.inprocess import case_inputs
    from bench.conformance.impls import varied_attrs
    from bench.power.measure import grid_outputs
    from bench.power.mutants import KERNELS

    eng = engine if engine is not None else gpuemu._core.Engine()
    vary = varied_attrs(op) or None
    t0 = time.perf_counter()
    first: Dict[str, Optional[int]] = {k: None for k in keys}
    first_error: Dict[str, Any] = {}
    worst: Dict[str, float] = {k: 0.0 for k in keys}
    control_failed: List[int] = []
    control_worst = 0.0
    problems: List[str] = []
    judged = 0
    for i in range(cases):
        pending = [k for k in keys if first[k] is None]
        if not pending and not control:
            break
        case = eng.cases(op, seed, 1, dtypes=[dtype], strategy=strategy, vary_attrs=vary, layouts=True, start=i)[0]
        judge = eng.case_judge(case)
        args = case_inputs(case, "torch")
        judged += 1
        try:
            with torch.no_grad():
                for k in pending:
                    v = judge.judge(output_arrays(FORMULATIONS[k].fn(dict(args))))
                    e = v.get("max_error")
                    e = math.inf if e in ("inf", None) else float(e)
                    worst[k] = max(worst[k], e)
                    if not v["passed"]:
                        first[k] = i
                        first_error[k] = {"error": e, "dims": case.dims, "attrs": case.attrs}
                if control:
                    for _j, outs in grid_outputs(KERNELS[op], dict(args), (1,)):
                        v = judge.judge(outs)
                        e = v.get("max_error")
                        control_worst = max(control_worst, math.inf if e in ("inf", None) else float(e))
                        if not v["passed"]:
                            control_failed.append(i)
        except Exception as exc:  # a harness defect: recorded, never counted as a catch
            problems.append(f"case {i}: {type(exc).__name__}: {exc}")
        finally:
            del judge
    return {"op": op, "dtype": dtype, "seed": seed, "strategy": strategy, "cases_asked": cases,
            "cases_judged": judged, "first_failure": first, "first_failure_case": first_error,
            "worst_before_catch": worst, "control": control, "control_failed": control_failed,
            "control_worst": control_worst, "problems": problems, "seconds": round(time.perf_counter() - t0, 2)}


_ENGINE = None


def _worker_init() -> None:
    torch.set_num_threads(1)


def _run(job: Tuple[str, Tuple[str, ...], str, int, int, str, bool]) -> Dict[str, Any]:
    global _ENGINE
    import gpuemu

    if _ENGINE is None:
        _ENGINE = gpuemu._core.Engine()
    op, keys, dtype, seed, cases, strategy, control = job
    return measure_run(op, keys, dtype, seed, cases, strategy, control, engine=_ENGINE)


def _median(xs: List[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return math.nan if not n else (s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2]))


def summarize(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per (mutant, dtype): runs, runs caught, the median first-failure index over the caught runs."""
    by: Dict[Tuple[str, str], List[Tuple[int, Optional[int]]]] = {}
    for r in runs:
        for k, f in r["first_failure"].items():
            by.setdefault((k, r["dtype"]), []).append((r["seed"], f))
    order = {"float32": 0, "float16": 1, "bfloat16": 2}
    out = []
    for (k, dt), vals in sorted(by.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9))):
        seen: Dict[int, Optional[int]] = {}
        for s, f in vals:
            seen[s] = f
        firsts = [f for f in seen.values() if f is not None]
        out.append({"mutant": k, "dtype": dt, "runs": len(seen), "caught": len(firsts),
                    "rate": len(firsts) / len(seen) if seen else math.nan,
                    "median_first_failure": _median([float(f) for f in firsts]) if firsts else None,
                    "invisible": INVISIBLE.get((k, dt))})
    return out


def markdown(entries: List[Dict[str, Any]], before: Optional[List[Dict[str, Any]]] = None) -> str:
    prev = {(e["mutant"], e["dtype"]): e for e in (before or [])}
    head = "| mutant | what it computes | dtype | seeds caught | median first failure |"
    sep = "|---|---|---|---:|---:|"
    if before is not None:
        head += " seeds caught before |"
        sep += "---:|"
    lines = [head, sep]
    for e in entries:
        f = FORMULATIONS.get(e["mutant"])
        med = "—" if e["median_first_failure"] is None else f"{e['median_first_failure']:g}"
        goal = "" if e["rate"] >= DETECTION_RATE or e["invisible"] else " **(< 95%)**"
        row = (f"| {e['mutant']} | {f.describe if f else ''} | {e['dtype']} | {e['caught']}/{e['runs']}{goal} | "
               f"{med} |")
        if before is not None:
            p = prev.get((e["mutant"], e["dtype"]))
            row += f" {p['caught']}/{p['runs']} |" if p else " — |"
        lines.append(row)
    return "\n".join(lines)


def uncovered_ops() -> List[str]:
    """Catalogue ops with neither a formulation mutant nor an entry in EXCEPTIONS."""
    from gpuemu import ops

    have = {f.op for f in FORMULATIONS.values()}
    names = sorted(o["name"] if isinstance(o, dict) else str(o) for o in ops())
    return [o for o in names if o not in have and o not in EXCEPTIONS]


def notes_markdown() -> str:
    lines = ["Invisible in a dtype whatever the input:", ""]
    lines += [f"- {k} {dt}: {why}" for (k, dt), why in sorted(INVISIBLE.items())]
    lines += ["", "Ops without a formulation mutant:", ""]
    lines += [f"- {op}: {why}" for op, why in sorted(EXCEPTIONS.items())]
    return "\n".join(lines)


def plan(keys: Sequence[str], dtypes: Optional[Sequence[str]], seeds: Sequence[int], cases: int, strategy: str,
         control: bool):
    from gpuemu import op_schema

    by_op: Dict[str, List[str]] = {}
    for k in keys:
        by_op.setdefault(FORMULATIONS[k].op, []).append(k)
    jobs = []
    for op, ks in by_op.items():
        for dt in op_schema(op)["dtypes"]:
            if dtypes and dt not in dtypes:
                continue
            for s in seeds:
                jobs.append((op, tuple(ks), dt, MASTER_SEED_BASE + s, cases, strategy, control))
    return jobs


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", nargs="*", help="op.name keys, or op names (default: every formulation)")
    ap.add_argument("--dtypes", nargs="*")
    ap.add_argument("--seeds", type=int, default=20, help="master seeds 0..N-1 (20261201 + i)")
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--strategy", default="adversarial")
    ap.add_argument("--control", action="store_true", help="judge the correct control on every case too")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", help="write runs.jsonl, formulations.json and formulations.md here")
    ap.add_argument("--before", help="a formulations.json to compare with (the generator before a change)")
    ap.add_argument("--from-runs", nargs="*", help="only summarise these runs.jsonl(.gz) files")
    a = ap.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    keys = []
    for m in a.mutants or sorted(FORMULATIONS):
        keys += [m] if m in FORMULATIONS else [k for k, f in FORMULATIONS.items() if f.op == m]
    if not keys:
        ap.error("no such mutant")
    runs: List[Dict[str, Any]] = []
    t0 = time.perf_counter()
    if a.from_runs:
        for p in a.from_runs:
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rt") as f:
                runs += [json.loads(line) for line in f if line.strip()]
    else:
        out = Path(a.out) if a.out else None
        if out:
            out.mkdir(parents=True, exist_ok=True)
        sink = open(out / "runs.jsonl", "a") if out else None
        jobs = plan(keys, a.dtypes, range(a.seeds), a.cases, a.strategy, a.control)
        print(f"formulations: {len(jobs)} runs", file=sys.stderr)
        with ProcessPoolExecutor(max(1, a.jobs), mp_context=mp.get_context("spawn"), initializer=_worker_init) as pool:
            futs = [pool.submit(_run, j) for j in jobs]
            for n, fut in enumerate(as_completed(futs), 1):
                r = fut.result()
                runs.append(r)
                if sink:
                    sink.write(json.dumps(r) + "\n")
                    sink.flush()
                for p in r["problems"][:1]:
                    print(f"HARNESS ERROR {r['op']} {r['dtype']} {r['seed']}: {p}", file=sys.stderr)
                if n % 20 == 0 or n == len(jobs):
                    print(f"  {n}/{len(jobs)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        if sink:
            sink.close()
    entries = summarize(runs)
    before = json.load(open(a.before))["entries"] if a.before else None
    table = markdown(entries, before)
    print(table)
    problems = sum(len(r["problems"]) for r in runs)
    control_failed = sum(len(r["control_failed"]) for r in runs)
    meta = {"command": "python -m bench.power.formulations " + " ".join(argv if argv is not None else sys.argv[1:]),
            "runs": len(runs), "problems": problems, "control_failed_cases": control_failed,
            "control_runs": sum(1 for r in runs if r["control"]), "seconds": round(time.perf_counter() - t0, 1)}
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "formulations.json", "w") as f:
            json.dump({"meta": meta, "entries": entries}, f, indent=1)
            f.write("\n")
        with open(out / "formulations.md", "w") as f:
            f.write(f"Command: `{meta['command']}`\n\n{table}\n\n{notes_markdown()}\n")
    print(f"\n{len(runs)} runs, {problems} harness errors, {control_failed} control failures, "
          f"{meta['seconds']:.0f} s", file=sys.stderr)
    return 1 if problems or control_failed else 0


if __name__ == "__main__":
    sys.exit(main())
