"""Where the fp64 oracle runs (gpuemu.set_oracle / gpuemu.oracle; docs/gpu.md, "The fp64 oracle on
the GPU"). Here there is no GPU: "cuda" must say why and leave the CPU in charge; on a GPU machine
it must start and report its device. The agreement of the two backends is checked on the GPU by
tests/cpp/gpu_oracle_test.cpp (scripts/gpu/run.sh oracle)."""

import numpy as np
import pytest

import gpuemu


@pytest.fixture(autouse=True)
def _cpu_after():
    yield
    gpuemu.set_oracle("cpu", min_macs=1 << 26)


def test_the_cpu_is_the_default_and_reports_itself():
    info = gpuemu.oracle()
    assert info["backend"] == "cpu"
    assert info["description"] == "cpu (OpenBLAS)"
    assert info["min_macs"] == 1 << 26
    assert set(info) == {"backend", "description", "min_macs", "gemms", "attention_blocks", "failures"}


def test_an_unknown_backend_is_a_validation_error():
    with pytest.raises(gpuemu.ValidationError, match="cpu | cuda"):
        gpuemu.set_oracle("tpu")
    assert gpuemu.oracle()["backend"] == "cpu"


def test_cuda_starts_or_says_why_and_the_references_still_run():
    try:
        gpuemu.set_oracle("cuda", min_macs=0)
    except gpuemu.ToolMissingError as e:
        assert "CUDA oracle backend" in str(e)
        assert gpuemu.oracle()["backend"] == "cpu"
    else:
        assert gpuemu.oracle()["backend"] == "cuda"
        assert gpuemu.oracle()["description"].startswith("cuda: ")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), dtype=np.float32)
    out = gpuemu.reference("matmul", {"a": a, "b": b})
    np.testing.assert_array_equal(out, a.astype(np.float64) @ b)
