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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "power"))

import gpuemu  # noqa: E402
from lowp_bugs import (  # noqa: E402
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
    sum|x| / |sum x| is at least 2^7 (or whose sum is exactly 0)."""
    seen = []

    def run(a):
        x = a["x"].double().movedim(a["dim"] % a["x"].dim(), -1)
        if x.shape[-1] >= 2:
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
