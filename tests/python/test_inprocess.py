"""gpuemu.inprocess: the in-process fuzzing facade. run_op sees the case's real layouts (strides,
storage offset, stride-0 expansions) as torch tensors, bfloat16 as torch.bfloat16, its exceptions
become failures carrying the traceback, and a seed reproduces the same cases byte for byte."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpuemu import from_bits  # noqa: E402
from gpuemu._native import core  # noqa: E402
from gpuemu.inprocess import case_inputs, fuzz_op_in_process, replay  # noqa: E402

torch.set_num_threads(1)  # 2 threads on this loaded 2-core VM run ~20x slower (spin-waits)
SEED = 1234


def softmax_ok(inputs):
    x = inputs["x"]
    return torch.softmax(x.float(), dim=inputs["dim"]).to(x.dtype)


def test_inputs_keep_the_case_layout_exactly():
    eng = core().Engine()
    cases = eng.cases("softmax", SEED, 40)
    kinds = set()
    for case in cases:
        (dt, shape, strides, offset, _storage) = case.snapshot()["x"]
        arr, _ = case.inputs()["x"]
        x = case_inputs(case)["x"]
        assert isinstance(x, torch.Tensor)
        assert list(x.shape) == list(shape)
        assert list(x.stride()) == list(strides)
        assert x.storage_offset() == offset
        expected = from_bits(arr, "bfloat16") if dt == "bfloat16" else arr.astype(np.float64)
        assert np.array_equal(x.double().numpy(), expected, equal_nan=True)
        kinds.add(case.layouts["x"])
    assert kinds - {"contiguous"}, "40 softmax cases should include non-contiguous layouts"


def test_run_op_sees_non_contiguous_tensors():
    seen = []

    def run_op(inputs):
        x = inputs["x"]
        seen.append((x.is_contiguous(), tuple(x.stride()), x.storage_offset()))
        return softmax_ok(inputs)

    r = fuzz_op_in_process("softmax", run_op, iterations=40, seed=SEED)
    assert r.ok, r.summary()
    assert r.total == 40 and len(seen) == 40
    assert any(not c for c, _, _ in seen), "no non-contiguous input reached run_op"
    assert any(0 in s for _, s, _ in seen) or any(o > 0 for _, _, o in seen)


def test_layouts_false_keeps_inputs_contiguous():
    seen = []

    def run_op(inputs):
        seen.append(inputs["x"].is_contiguous())
        return softmax_ok(inputs)

    assert fuzz_op_in_process("softmax", run_op, iterations=20, seed=SEED, layouts=False).ok
    assert all(seen)


def test_contiguity_assumption_is_caught():
    def run_op(inputs):  # reads data_ptr as a contiguous [R, N] matrix
        x = inputs["x"]
        flat = torch.as_strided(x, x.shape, (x.shape[1], 1), x.storage_offset()) if x.storage().size() >= (
            x.storage_offset() + x.numel()) else x.contiguous().flip(0)
        return torch.softmax(flat.float(), dim=-1).to(x.dtype)

    r = fuzz_op_in_process("softmax", run_op, iterations=40, seed=SEED, dtypes=["float32"])
    assert not r.ok
    assert all(f.layout["x"] != "contiguous" for f in r.failures)


def test_bfloat16_arrives_as_torch_bfloat16():
    dtypes = []

    def run_op(inputs):
        dtypes.append(inputs["x"].dtype)
        return softmax_ok(inputs)

    r = fuzz_op_in_process("softmax", run_op, iterations=10, seed=SEED, dtypes=["bfloat16"])
    assert r.ok, r.summary()
    assert dtypes == [torch.bfloat16] * 10


def test_bfloat16_output_is_judged_by_value():
    def run_op(inputs):  # a bf16 output rounded wrongly (truncated by two ulps) must fail
        x = inputs["x"]
        y = torch.softmax(x.float(), dim=inputs["dim"]).to(torch.bfloat16)
        return (y.view(torch.int16) - 2).view(torch.bfloat16)

    r = fuzz_op_in_process("softmax", run_op, iterations=10, seed=SEED, dtypes=["bfloat16"], layouts=False)
    assert not r.ok


def test_exception_in_run_op_is_a_failure_with_traceback():
    def run_op(inputs):
        if inputs["x"].shape[1] % 2 == 1:
            raise ValueError("odd rows are not supported by this kernel")
        return softmax_ok(inputs)

    r = fuzz_op_in_process("softmax", run_op, iterations=30, seed=SEED)
    assert r.total == 30 and not r.ok
    odd = [f for f in r.failures]
    assert odd and all(f.dims["N"] % 2 == 1 for f in odd)
    f = odd[0]
    assert f.traceback and "ValueError: odd rows are not supported" in f.traceback
    assert "run_op" in f.traceback  # the frame of the user's function
    assert "odd rows are not supported" in f.message
    assert f.max_error == float("inf")


def test_bad_return_value_is_a_failure():
    r = fuzz_op_in_process("softmax", lambda inputs: "not a tensor", iterations=3, seed=SEED)
    assert r.failed == 3
    assert all(f.traceback and "TypeError" in f.traceback for f in r.failures)


def _digest_run(seed, **kw):
    digests = []

    def run_op(inputs):
        x = inputs["x"]
        h = hashlib.sha256()
        h.update(str((x.dtype, tuple(x.shape), tuple(x.stride()), x.storage_offset())).encode())
        h.update(x.contiguous().view(torch.uint8).numpy().tobytes() if x.dtype != torch.bfloat16
                 else x.contiguous().view(torch.int16).numpy().tobytes())
        digests.append(h.hexdigest())
        return softmax_ok(inputs)

    r = fuzz_op_in_process("softmax", run_op, iterations=15, seed=seed, **kw)
    return digests, r


def test_same_seed_same_cases_and_bytes():
    a, ra = _digest_run(SEED)
    b, rb = _digest_run(SEED)
    c, _ = _digest_run(SEED + 1)
    assert a == b
    assert a != c
    assert ra.seed == rb.seed == SEED


def test_random_seed_is_reported_and_replays():
    a, ra = _digest_run(None, value_distribution="boundary")
    b, _ = _digest_run(ra.seed, value_distribution="boundary")
    assert a == b


def test_failure_fields_and_replay():
    def leaky(inputs):  # softmax with the row max left out: overflows on large logits
        x = inputs["x"]
        e = torch.exp(x.float())
        return (e / e.sum(dim=inputs["dim"], keepdim=True)).to(x.dtype)

    r = fuzz_op_in_process("softmax", leaky, iterations=20, seed=SEED, dtypes=["float32"])
    assert not r.ok
    f = r.failures[0]
    assert f.id == f"softmax:{SEED}:{f.index}"
    assert f.dtype == "float32" and f.shapes["x"] == [f.dims["R"], f.dims["N"]]
    assert set(f.layout) == {"x"} and "dim" in f.attrs
    assert f.max_error > f.envelope > 0
    assert f.message and f.repro.startswith("gpuemu.inprocess.replay('softmax', run_op, case_seed=")
    assert "bug_class" in f.diagnosis
    again = replay("softmax", leaky, f.seed, dtypes=["float32"])
    assert again["passed"] is False
    assert replay("softmax", softmax_ok, f.seed, dtypes=["float32"])["passed"] is True


def test_fail_fast_and_minimize():
    def leaky(inputs):
        x = inputs["x"]
        e = torch.exp(x.float())
        return (e / e.sum(dim=inputs["dim"], keepdim=True)).to(x.dtype)

    r = fuzz_op_in_process("softmax", leaky, iterations=50, seed=SEED, dtypes=["float32"], fail_fast=True,
                           minimize=True)
    assert len(r.failures) == 1 and r.total == r.first_failure + 1
    m = r.failures[0].minimized
    assert m and "summary" in m


def test_numpy_framework():
    def run_op(inputs):
        x = inputs["x"]
        assert isinstance(x, np.ndarray) and x.dtype == np.float32
        e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)

    r = fuzz_op_in_process("softmax", run_op, iterations=10, seed=SEED, framework="numpy", dtypes=["float32"])
    assert r.ok, r.summary()


def test_validation_errors():
    from gpuemu.errors import GpuemuError, ValidationError

    with pytest.raises(ValidationError):
        fuzz_op_in_process("softmax", softmax_ok, framework="jax")
    with pytest.raises(ValidationError):
        fuzz_op_in_process("softmax", softmax_ok, value_distribution="weird")
    with pytest.raises(GpuemuError):
        fuzz_op_in_process("no_such_op", softmax_ok, iterations=1)
