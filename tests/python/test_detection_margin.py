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
