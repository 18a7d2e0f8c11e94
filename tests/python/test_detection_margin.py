"""Detection power at the margin (issue 21, docs/evidence.md): the sharpenings, through the public API.

The exact ops (relu, amax, embedding) return one of their inputs: nothing rounds, so a correct kernel
matches the reference bit for bit and the model's bound there is zero (RefOutput::exact). Before,
their bound still held the output's rounding (half an ulp, envelope 2), so a kernel one ulp off on
some elements passed every case: the power curve showed 5 of 49 such float32 runs escaping amax and
embedding, 7 of 49 relu. Each test below judges PyTorch's own kernel (must pass) and the same kernel
with its largest finite output moved one ulp (must fail, in every case that has a finite nonzero
output).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gpuemu
from bench.power.lowp_bugs import (
    gemm_splitk2_lowp,
    logsumexp_lowp_sum,
    logsumexp_running_loop,
    sum_pair_preadd,
    sum_partials_lowp,
    upcast,
)

torch.set_num_threads(1)
DTYPES = ["float32", "float16", "bfloat16"]

EXACT_OPS = {
    # through float32: Debian's torch 1.13 has no float16 relu on the CPU (relu is exact either way)
    "relu": lambda a: torch.relu(a["x"].float()).to(a["x"].dtype),
    "amax": lambda a: torch.amax(a["x"], dim=a["dim"], keepdim=a["keepdim"]),
    "embedding": lambda a: F.embedding(a["indices"], a["weight"]),
}


BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _one_ulp_off(fn):
    """fn, with its largest finite nonzero output below the dtype's max moved one ulp away from zero
    (its bit pattern plus one: sign and magnitude)."""

    def run(a):
        out = fn(a).contiguous().clone()
        flat = out.view(-1)
        big = torch.finfo(out.dtype).max
        room = torch.isfinite(flat) & (flat != 0) & (flat.abs() < big)
        if room.any():
            mags = torch.where(room, flat.abs().float(), torch.zeros_like(flat, dtype=torch.float32))
            i = int(torch.argmax(mags))
            flat.view(BITS[out.dtype])[i] += 1
        return out

    return run


def _fuzz(op, fn, dtype, strategy, cases):
    return gpuemu.fuzz_op_in_process(op, fn, iterations=cases, seed=20261203, value_distribution=strategy,
                                     dtypes=[dtype], diagnose=False)


@pytest.mark.parametrize("op", sorted(EXACT_OPS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_op_passes_torch_and_fails_one_ulp(op, dtype):
    fn = EXACT_OPS[op]
    good = _fuzz(op, fn, dtype, "adversarial", 20)
    assert good.ok, good.summary()
    bad = _fuzz(op, _one_ulp_off(fn), dtype, "adversarial", 20)
    assert not bad.ok, bad.summary()
    # Every case the nudge could touch fails (the adversarial values hold finite nonzero outputs).
    assert bad.failed == bad.total, bad.summary()
    assert "differ from the exact result" in bad.failures[0].message


@pytest.mark.parametrize("op", sorted(EXACT_OPS))
def test_exact_op_passes_torch_on_special_and_boundary_values(op):
    """Zero bound does not break what the special values need: NaN/Inf propagation, signed zeros,
    subnormals (torch's CPU kernels keep them; a flush-to-zero kernel would be admitted too)."""
    for strategy in ("special", "boundary"):
        for dtype in DTYPES:
            res = _fuzz(op, EXACT_OPS[op], dtype, strategy, 15)
            assert res.ok, (strategy, dtype, res.summary())


# ---------------------------------------------------------------------------------------------
# Lines at the limit (values.cpp: cancel_lines, center_log_sum_exp). A float16 or bfloat16 sum is
# rounded once more at the end, at u_out * |sum|; an fp32-level loss inside the kernel shows only
# where that rounding is small next to u_fp32 * sum |x|: on lines that cancel. So every adversarial
# case of sum, mean and cumsum holds lines of pairs v, -v + c*ulp(v), and every logsumexp case lines
# shifted to log-probabilities (log-sum-exp near 0). Below, precision bugs of the kind real kernels
# make (bench/power/lowp_bugs.py), each caught in far more cases than before (the generator
# before 38e6920, same seeds, in brackets: sum partials 9-11 of 100, pre-add 19-22, logsumexp 5-6).


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "op,bug,at_least",
    [("sum", sum_partials_lowp, 30), ("sum", sum_pair_preadd, 60), ("logsumexp", logsumexp_lowp_sum, 50)],
    ids=["sum-partials-lowp", "sum-pair-preadd", "logsumexp-lowp-sum"],
)
def test_precision_bug_caught_in_most_cases(op, bug, at_least, dtype):
    res = gpuemu.fuzz_op_in_process(op, bug, iterations=100, seed=1, dtypes=[dtype], diagnose=False)
    assert res.failed >= at_least, res.summary()
    assert res.first_failure <= 2, res.summary()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "mean", "cumsum", "logsumexp"])
def test_lines_at_the_limit_pass_correct_kernels(op, dtype):
    """The fp32-accumulating kernels (torch's, through float32) pass the new cases."""
    res = gpuemu.fuzz_op_in_process(op, upcast(op), iterations=50, seed=1, dtypes=[dtype], diagnose=False)
    assert res.ok, res.summary()


def test_every_sum_case_holds_a_cancelling_line():
    """Each adversarial sum case with two or more elements per line has a line whose condition number
    sum|x| / |sum x| is at least 2^7 (or whose sum is exactly 0). The run varies dim (the kernel
    reads it): a case whose layout expands x along dim (stride 0) repeats one value down each line,
    which no value can make cancel, and is not counted."""
    seen = []

    def run(a):
        d = a["dim"] % a["x"].dim()
        x = a["x"].double().movedim(d, -1)
        if x.shape[-1] >= 2 and a["x"].stride(d) != 0:
            s, t = x.sum(-1).abs(), x.abs().sum(-1)
            seen.append(bool(((s == 0) & (t > 0) | (t >= 128 * s)).any()))
        return upcast("sum")(a)

    res = gpuemu.fuzz_op_in_process("sum", run, iterations=40, seed=2, dtypes=["bfloat16"], diagnose=False)
    assert res.ok, res.summary()
    assert len(seen) >= 30 and all(seen), seen


def test_running_sum_over_repeated_terms_is_admitted():
    """The case the Conformance sweep found once log-sum-exps near 0 were drawn (logsumexp, bfloat16,
    master seed 20261205, case 32: 35 rows of 15,298 logits, a single-thread fp32 loop): the loop's
    sum of exponentials erred by 271 u, 2.2 sqrt(N), because a bfloat16 row holds about 155 distinct
    values and every copy of a value rounds the same way on the running sum's grid. It failed at 2.04
    with sqrt(N) as the sum's growth; with the repeats' growth (SumGrowth::repeat_growth) it passes."""
    res = gpuemu.fuzz_op_in_process("logsumexp", logsumexp_running_loop, iterations=33, seed=20261205,
                                    dtypes=["bfloat16"], vary_attrs=["dim", "keepdim"], diagnose=False)
    assert res.ok, res.summary()
    # and the precision bug of the same op is still caught in most cases (the sum stored in bf16)
    bad = gpuemu.fuzz_op_in_process("logsumexp", logsumexp_lowp_sum, iterations=33, seed=20261205,
                                    dtypes=["bfloat16"], vary_attrs=["dim", "keepdim"], diagnose=False)
    assert bad.failed >= 20, bad.summary()


def test_running_sum_meeting_the_max_early_is_admitted_near_zero():
    """logsumexp's terms hold the max's exp(0) = 1: a running sum that meets it early adds every
    later term at S ~ s, and where the result is near 0 (log-probability rows) nothing hides the
    sum's error. The single-thread fp32 loop failed master seed 20261224 at 2.12 (1 of 10,059
    outputs) with sqrt(N) as the growth; with sqrt(3N) (6 standard deviations at the envelope) it
    passes."""
    res = gpuemu.fuzz_op_in_process("logsumexp", logsumexp_running_loop, iterations=100, seed=20261224,
                                    dtypes=["float32"], vary_attrs=["dim", "keepdim"], diagnose=False)
    assert res.ok, res.summary()


# ---------------------------------------------------------------------------------------------
# Cancelling dot products (values.cpp: draw_jointly). A float16 or bfloat16 GEMM's output is rounded
# once more at the end, at u_out * |a.b|; an fp32-level loss in its accumulation (u_fp32 * sum|a*b|)
# shows only where a.b is small next to sum|a*b|. Every adversarial GEMM and convolution case now
# holds such dot products: one column of b (and each other with probability 1/8) cancels a chosen
# row of a pair by pair; a convolution's x cancels a channel's weights under one output. The bug: a
# split-K GEMM whose two partials are stored in the input dtype (cuBLAS's "reduced precision
# reduction", or `acc += tl.dot(a, b).to(x.dtype)`). At seed 1, 50 cases, the generator before
# (3e0af78) caught it in 24-30 cases (matmul 24/25, linear 30/29, bmm 26/26 in bfloat16/float16);
# this one in 40-48.

GEMMS = ["matmul", "linear", "bmm"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", GEMMS)
def test_gemm_partials_in_the_input_dtype_caught_in_most_cases(op, dtype):
    res = gpuemu.fuzz_op_in_process(op, gemm_splitk2_lowp, iterations=50, seed=1, dtypes=[dtype], diagnose=False)
    assert res.failed >= 36, res.summary()
    assert res.first_failure <= 1, res.summary()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", GEMMS)
def test_cancelling_dot_products_pass_correct_kernels(op, dtype):
    """fp32-accumulating GEMMs (torch's, through float32) pass the cancelling cases, and so does
    the same split-K in float32 (partials kept in fp32: a correct kernel)."""
    for fn in (upcast(op), gemm_splitk2_lowp if dtype == "float32" else upcast(op)):
        res = gpuemu.fuzz_op_in_process(op, fn, iterations=30, seed=3, dtypes=[dtype], diagnose=False)
        assert res.ok, res.summary()


def _exact_and_magnitude(op, a):
    """The op's exact output (float64) and the same with every operand replaced by its magnitude
    (sum |a*b| per output, + |bias|). An output whose taps all fall in a convolution's zero padding
    is its bias alone: nothing there can cancel."""
    if op in ("conv1d", "conv2d"):
        conv = F.conv1d if op == "conv1d" else F.conv2d
        kw = {k: a[k] for k in ("stride", "padding", "dilation", "groups")}
        x, w = a["x"].double(), a["weight"].double()
        b = a.get("bias")
        b = None if b is None else b.double()
        return conv(x, w, b, **kw), conv(x.abs(), w.abs(), None if b is None else b.abs(), **kw)
    if op == "linear":
        x, w = a["x"].double(), a["weight"].double()
        b = a.get("bias")
        b = None if b is None else b.double()
        return F.linear(x, w, b), F.linear(x.abs(), w.abs(), None if b is None else b.abs())
    x, w = a["a"].double(), a["b"].double()
    return x @ w, x.abs() @ w.abs()


@pytest.mark.parametrize("op", GEMMS + ["conv1d", "conv2d"])
def test_every_gemm_and_conv_case_holds_a_cancelling_dot_product(op):
    """Each adversarial case whose dot products have two or more terms holds an output whose
    condition number sum|a*b| / |a.b| is at least 2^7 (or whose exact value is 0 while sum|a*b| is
    not), expanded (stride-0) operands included."""
    seen = []

    def run(a):
        exact, mag = _exact_and_magnitude(op, a)
        s, t = exact.abs(), mag
        k = a["x"].shape[-1] if op == "linear" else a["a"].shape[-1] if op in GEMMS else 2
        terms = t - (a["bias"].double().abs().view(-1, *([1] * (t.dim() - 2))) if a.get("bias") is not None and op.startswith("conv") else 0)
        if k >= 2 and bool((terms > 0).any()):
            seen.append(bool(((s == 0) & (t > 0) | (t >= 128 * s)).any()))
        return _upcast_any(op)(a)

    res = gpuemu.fuzz_op_in_process(op, run, iterations=40, seed=2, dtypes=["bfloat16"],
                                    vary_attrs=["stride", "padding", "dilation", "groups"] if op.startswith("conv") else None,
                                    diagnose=False)
    assert res.ok, res.summary()
    assert len(seen) >= 30 and all(seen), seen


def _upcast_any(op):
    if op in ("conv1d", "conv2d"):
        conv = F.conv1d if op == "conv1d" else F.conv2d

        def run(a):
            b = a.get("bias")
            kw = {k: a[k] for k in ("stride", "padding", "dilation", "groups")}
            y = conv(a["x"].float(), a["weight"].float(), None if b is None else b.float(), **kw)
            return y.to(a["x"].dtype)

        return run
    return upcast(op)
