"""gpuemu.reference in process: softmax / log_softmax against torch float64 on odd shapes and every
input route (numpy of each dtype, torch CPU tensors including bfloat16, non-contiguous layouts,
(bits, dtype) pairs), and the errors a caller gets for a wrong call."""

from __future__ import annotations

import numpy as np
import pytest

import gpuemu
from gpuemu import dtypes
from gpuemu.errors import GpuemuError, ShapeMismatchError, UnknownOpError, ValidationError

torch = pytest.importorskip("torch")

SHAPES = [(1, 1), (1, 7), (3, 1), (5, 33), (7, 129), (2, 1000), (13, 257)]


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-12, scale=None) -> None:
    """|got - want| <= rtol * (|want| + scale): relative, or relative to `scale` where the exact
    result is a difference of larger terms (log_softmax's x - max - log(sum))."""
    assert got.dtype == np.float64
    assert got.shape == want.shape
    err = np.abs(got - want)
    bound = rtol * (np.abs(want) + (0 if scale is None else scale)) + 1e-300
    assert (err <= bound).all(), f"max rel err {np.max(err / np.maximum(np.abs(want), 1e-300)):.3e}"


def torch_softmax(x, dim=-1, log=False):
    t = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    t = t.double()
    return (torch.log_softmax if log else torch.softmax)(t, dim=dim).numpy()


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_float32_numpy(shape):
    g = np.random.default_rng(sum(shape))
    x = (g.standard_normal(shape) * 4).astype(np.float32)
    out = gpuemu.reference("softmax", {"x": x})
    assert isinstance(out, np.ndarray)
    assert_close(out, torch_softmax(x))
    assert_close(gpuemu.reference("softmax", {"x": x}, dim=0), torch_softmax(x, dim=0))


@pytest.mark.parametrize("shape", [(1, 1), (4, 77), (9, 300)])
def test_log_softmax(shape):
    x = (np.random.default_rng(3).standard_normal(shape) * 10).astype(np.float16)
    # log_softmax(x) = (x - max) - log(sum): near the row's max the result is tiny and both fp64
    # computations carry an absolute error of a few ulp of |x| + |max| + 1; 1e-12 relative to
    # that (not to the tiny result; torch and gpuemu differ by 4e-10 relative there).
    xd = x.astype(np.float64)
    scale = np.abs(xd) + np.abs(xd.max(axis=-1, keepdims=True)) + 1.0
    assert_close(gpuemu.reference("log_softmax", {"x": x}), torch_softmax(x, log=True), scale=scale)


def test_softmax_float64_and_float16_numpy():
    g = np.random.default_rng(7)
    x64 = g.standard_normal((6, 45)) * 3
    assert_close(gpuemu.reference("softmax", {"x": x64}), torch_softmax(x64))
    x16 = x64.astype(np.float16)
    # The reference sees the float16 values exactly (not x64).
    assert_close(gpuemu.reference("softmax", {"x": x16}), torch_softmax(x16.astype(np.float64)))


def test_softmax_bfloat16_through_torch():
    torch.manual_seed(0)
    x = (torch.randn(11, 67) * 5).to(torch.bfloat16)
    out = gpuemu.reference("softmax", {"x": x})
    assert_close(out, torch_softmax(x))
    # The same bits as a (bits, dtype) pair give the same result.
    bits = x.view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(gpuemu.reference("softmax", {"x": (bits, "bfloat16")}), out)
    np.testing.assert_array_equal(gpuemu.reference("softmax", {"x": (bits, torch.bfloat16)}), out)
    # And the values the reference read are the bf16 values, not something rounded again.
    np.testing.assert_array_equal(dtypes.from_bits(bits, "bfloat16"), x.double().numpy())


def test_torch_float_dtypes_and_requires_grad():
    for dt in (torch.float32, torch.float16, torch.float64):
        x = torch.randn(4, 21, dtype=torch.float32).to(dt).requires_grad_(dt != torch.float16)
        assert_close(gpuemu.reference("softmax", {"x": x}), torch_softmax(x.detach()))


def test_non_contiguous_torch_inputs():
    base = torch.randn(40, 30).to(torch.bfloat16)
    cases = {
        "transposed": base.t(),                        # [30, 40], strides (1, 30)
        "strided": base[::3, 1::2],                    # steps in both dims
        "offset": base[5:12, 7:],                      # non-zero storage offset
        "expanded": base[3:4, :].expand(6, 30),        # stride 0
        "transposed-strided": base.t()[2::5, ::4],
    }
    for name, x in cases.items():
        assert not x.is_contiguous(), name
        out = gpuemu.reference("softmax", {"x": x})
        assert_close(out, torch_softmax(x.contiguous()))
        np.testing.assert_array_equal(out, gpuemu.reference("softmax", {"x": x.contiguous()}))


def test_non_contiguous_numpy_inputs():
    base = np.random.default_rng(1).standard_normal((20, 16)).astype(np.float32)
    cases = {
        "reversed": base[::-1, ::-2],                  # negative strides
        "fortran": np.asfortranarray(base),
        "broadcast": np.broadcast_to(base[2], (5, 16)),
        "transposed": base.T[3:, 1::3],
    }
    for name, x in cases.items():
        out = gpuemu.reference("softmax", {"x": x})
        assert_close(out, torch_softmax(np.ascontiguousarray(x)))
    big_endian = base.astype(">f4")
    assert_close(gpuemu.reference("softmax", {"x": big_endian}), torch_softmax(base))


def test_case_dtype_and_lists():
    out = gpuemu.reference("softmax", {"x": [[1.0, 2.0, 3.0]]}, dtype="float32")
    assert_close(out, torch_softmax(np.array([[1.0, 2.0, 3.0]])))


def test_catalogue_listing():
    names = gpuemu.ops()
    assert "softmax" in names and "log_softmax" in names and names == sorted(names)
    schema = gpuemu.op_schema("softmax")
    assert schema["name"] == "softmax"
    assert schema["source_file"].endswith("softmax.json")
    assert [i["name"] for i in schema["inputs"]] == ["x"]


# ---- errors ----


def test_unknown_op():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(UnknownOpError, match="unknown op 'softmx'.*softmax") as e:
        gpuemu.reference("softmx", {"x": x})
    assert e.value.code == "unknown_op"
    assert isinstance(e.value, GpuemuError) and isinstance(e.value, LookupError)


def test_bad_attrs():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValidationError, match="dimm") as e:
        gpuemu.reference("softmax", {"x": x}, dimm=0)
    assert e.value.code == "invalid_argument"
    with pytest.raises(ValidationError):
        gpuemu.reference("softmax", {"x": x}, dim="last")
    with pytest.raises(ValidationError):
        gpuemu.reference("softmax", {"x": x}, dim=5)
    with pytest.raises(ValidationError, match="unsupported value"):
        gpuemu.reference("softmax", {"x": x}, dim=object())


def test_bad_inputs():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValidationError, match="needs input 'x'"):
        gpuemu.reference("softmax", {})
    with pytest.raises(ValidationError, match="no input 'y'"):
        gpuemu.reference("softmax", {"x": x, "y": x})
    # softmax takes x of any rank >= 1 (PyTorch's (*, N)); matmul's a is exactly [M, K].
    with pytest.raises(ShapeMismatchError, match="rank at least 1"):
        gpuemu.reference("softmax", {"x": np.zeros((), np.float32)})
    with pytest.raises(ShapeMismatchError, match="must have rank 2"):
        gpuemu.reference("matmul", {"a": np.zeros((2, 3, 4), np.float32), "b": x})
    with pytest.raises(ValidationError, match="uint16"):
        gpuemu.reference("softmax", {"x": np.zeros((2, 3), np.uint16)})
    with pytest.raises(ValidationError, match="2-byte items"):
        gpuemu.reference("softmax", {"x": (np.zeros((2, 3), np.uint8), "bfloat16")})
    with pytest.raises(ValidationError, match="unknown dtype"):
        gpuemu.reference("softmax", {"x": (x, "float33")})
    with pytest.raises(ValidationError, match="objects"):
        gpuemu.reference("softmax", {"x": np.array([[object()]])})
    with pytest.raises(TypeError):
        gpuemu.reference("softmax", [x])


def test_error_mapping_for_every_code():
    from gpuemu import _core, errors

    expected = {
        "invalid_argument": errors.ValidationError,
        "unknown_op": errors.UnknownOpError,
        "schema_error": errors.SchemaError,
        "shape_mismatch": errors.ShapeMismatchError,
        "not_found": errors.NotFoundError,
        "io_error": errors.GpuemuIOError,
        "tool_missing": errors.ToolMissingError,
        "internal": errors.InternalError,
        "protocol_error": errors.ProtocolError,
        "timeout": errors.TimeoutError,
        "unavailable": errors.ConnectError,
        "conflict": errors.ConflictError,
        "storage_full": errors.StorageFullError,
    }
    assert set(_core.error_codes) == set(expected)
    for code, cls in expected.items():
        with pytest.raises(cls, match="^boom$") as e:
            _core._raise_error(code, "boom")
        assert type(e.value) is cls and e.value.code == code


def test_version_agrees_with_the_build():
    from gpuemu import _core

    assert gpuemu.__version__ == _core.__version__
    assert set(gpuemu.__all__) <= set(dir(gpuemu))
