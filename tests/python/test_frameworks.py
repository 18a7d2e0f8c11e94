"""gpuemu/_frameworks.py: wire storage -> framework tensors with the case's real layout, and
kernel outputs back to (dtype, contiguous numpy array). The module is loaded by path, as the
script runner loads it, so these tests need no compiled core (they also run where only numpy and
a framework are installed, e.g. on a GPU machine with JAX and CuPy). Frameworks that are absent
here are skipped with the reason; their "missing" error is tested instead."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "python" / "gpuemu" / "_frameworks.py"
_spec = importlib.util.spec_from_file_location("_gpuemu_frameworks_under_test", _PATH)
fw = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fw
_spec.loader.exec_module(fw)


def _storage(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint8).reshape(-1).copy()


# A [3, 4] float32 view, transposed from a [4, 3] storage at element offset 2.
F32 = np.arange(14, dtype=np.float32) * np.float32(0.5) - 3
F32_VIEW = dict(shape=[3, 4], strides=[1, 3], offset=2)
EXPECTED = np.lib.stride_tricks.as_strided(F32[2:], (3, 4), (4, 12)).copy()
# bfloat16 bits of some exact values (1.5, -2, 3.140625, tiny subnormal, inf, 0)
BF16 = np.array([0x3FC0, 0xC000, 0x4049, 0x0001, 0x7F80, 0x0000], dtype=np.uint16)
BF16_F32 = (BF16.astype(np.uint32) << 16).view(np.float32)


def _have(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _needs(name: str):
    return pytest.mark.skipif(not _have(name), reason=f"{name} is not installed here (the GPU machine has "
                                                      "JAX and CuPy; TensorFlow is tested where installed)")


# --- numpy ------------------------------------------------------------------------------------------

def test_numpy_view_is_zero_copy_with_real_strides():
    st = _storage(F32)
    inp = fw.make_input("numpy", "float32", **F32_VIEW, storage=st)
    x = inp.tensor
    np.testing.assert_array_equal(x, EXPECTED)
    assert not x.flags.c_contiguous and x.strides == (4, 12)
    assert np.shares_memory(x, st) and inp.own is None  # zero copy: the kernel's writes land on the wire storage


def test_numpy_bfloat16_and_fp8_arrive_as_exact_float32():
    inp = fw.make_input("numpy", "bfloat16", [6], [1], 0, _storage(BF16))
    assert inp.tensor.dtype == np.float32
    np.testing.assert_array_equal(inp.tensor, BF16_F32)
    e4 = fw.make_input("numpy", "float8_e4m3fn", [4], [1], 0, np.array([0x38, 0x7F, 0x01, 0xB8], np.uint8)).tensor
    assert e4[0] == 1.0 and np.isnan(e4[1]) and e4[2] == 2.0 ** -9 and e4[3] == -1.0
    e5 = fw.make_input("numpy", "float8_e5m2", [2], [1], 0, np.array([0x3C, 0x7C], np.uint8)).tensor
    assert e5[0] == 1.0 and np.isinf(e5[1])


def test_numpy_refuses_a_device():
    with pytest.raises(fw.FrameworkMissing, match="CPU only"):
        fw.make_input("numpy", "float32", [1], [1], 0, _storage(F32[:1]), device="cuda:0")


def test_outputs_numpy_bits_pairs_and_rounding_hook():
    assert fw.output_array(np.ones((2, 3), np.float16))[0] == "float16"
    name, arr = fw.output_array(np.ones((3, 2), np.float32).T)  # non-contiguous -> contiguous
    assert name == "float32" and arr.flags.c_contiguous and arr.shape == (2, 3)
    assert fw.output_array(BF16, "bfloat16")[0] == "bfloat16"  # uint16 in a bf16 case: its bits
    assert fw.output_array((BF16_F32, "bfloat16"))[0] == "float32"  # float values, no hook: the receiver rounds
    calls = []

    def hook(values, dtype):
        calls.append(dtype)
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    name, arr = fw.output_array(BF16_F32, "bfloat16", hook)
    assert name == "bfloat16" and calls == ["bfloat16"] and np.array_equal(arr, BF16)
    assert fw.output_array((np.arange(3), "int32"))[1].dtype == np.int32
    with pytest.raises(TypeError, match="None"):
        fw.output_array(None)
    with pytest.raises(TypeError, match="not an array"):
        fw.output_array({"a": 1})
    assert fw.output_array(np.ones(2, ">f4"))[1].dtype.byteorder in ("<", "=")


def test_unknown_framework():
    with pytest.raises(fw.FrameworkMissing, match="unknown framework 'mxnet'"):
        fw.require("mxnet")


@pytest.mark.parametrize("name", ["cupy", "jax", "tensorflow"])
def test_missing_framework_names_the_package(name):
    if _have(name):
        pytest.skip(f"{name} is installed here")
    with pytest.raises(fw.FrameworkMissing, match=f"framework '{name}' needs the Python package {name}"):
        fw.make_input(name, "float32", [1], [1], 0, _storage(F32[:1]))
    assert issubclass(fw.FrameworkMissing, ValueError)


# --- torch --------------------------------------------------------------------------------------------

@_needs("torch")
def test_torch_zero_copy_strides_and_bfloat16_bits():
    import torch

    st = _storage(F32)
    inp = fw.make_input("torch", "float32", **F32_VIEW, storage=st)
    x = inp.tensor
    assert isinstance(x, torch.Tensor) and list(x.stride()) == [1, 3] and x.storage_offset() == 2
    assert not x.is_contiguous()
    np.testing.assert_array_equal(x.numpy(), EXPECTED)
    x[0, 0] = 100.0  # zero copy: visible in the wire storage
    assert st.view(np.float32)[2] == 100.0 and inp.own is None
    b = fw.make_input("torch", "bfloat16", [6], [1], 0, _storage(BF16)).tensor
    assert b.dtype == torch.bfloat16
    assert np.array_equal(b.view(torch.int16).numpy().view(np.uint16), BF16)  # through the bits
    name, arr = fw.output_array(b.flip(0))
    assert name == "bfloat16" and np.array_equal(arr, BF16[::-1])
    if hasattr(torch, "float8_e4m3fn"):
        e4 = fw.make_input("torch", "float8_e4m3fn", [2], [1], 0, np.array([0x38, 0xB8], np.uint8)).tensor
        assert e4.dtype == torch.float8_e4m3fn and fw.output_array(e4)[0] == "float8_e4m3fn"
    else:  # an older torch: exact float32 values, from a storage of its own
        e4 = fw.make_input("torch", "float8_e4m3fn", [2], [1], 0, np.array([0x38, 0xB8], np.uint8))
        assert e4.tensor.dtype == torch.float32 and e4.tensor.tolist() == [1.0, -1.0] and e4.own is not None
    assert fw.memory_range(x) == fw.memory_range(x[1:])  # one storage


# --- CuPy, JAX, TensorFlow (where installed) ---------------------------------------------------------

@_needs("cupy")
def test_cupy_strided_on_the_device():
    import cupy as cp

    if cp.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no CUDA device")
    inp = fw.make_input("cupy", "float32", **F32_VIEW, storage=_storage(F32))
    x = inp.tensor
    assert isinstance(x, cp.ndarray) and x.strides == (4, 12)
    np.testing.assert_array_equal(cp.asnumpy(x), EXPECTED)
    name, arr = fw.output_array(x * 2)
    assert name == "float32" and np.array_equal(arr, EXPECTED * 2)
    b = fw.make_input("cupy", "bfloat16", [6], [1], 0, _storage(BF16)).tensor  # no bf16 in CuPy
    assert b.dtype == cp.float32 and np.array_equal(cp.asnumpy(b), BF16_F32)
    assert fw.memory_range(x) is not None


@_needs("jax")
def test_jax_values_layout_materialised_and_bfloat16_bits():
    import jax.numpy as jnp

    x = fw.make_input("jax", "float32", **F32_VIEW, storage=_storage(F32)).tensor
    np.testing.assert_array_equal(np.asarray(x), EXPECTED)
    c = fw.make_input("jax", "float32", [14], [1], 0, _storage(F32)).tensor  # contiguous: through DLPack
    np.testing.assert_array_equal(np.asarray(c), F32)
    b = fw.make_input("jax", "bfloat16", [6], [1], 0, _storage(BF16))
    assert b.tensor.dtype == jnp.bfloat16 and b.immutable
    name, arr = fw.output_array(b.tensor[::-1])
    assert name == "bfloat16" and np.array_equal(arr, BF16[::-1])
    if hasattr(jnp, "float8_e4m3fn"):
        e4 = fw.make_input("jax", "float8_e4m3fn", [2], [1], 0, np.array([0x38, 0xB8], np.uint8)).tensor
        assert e4.dtype == jnp.float8_e4m3fn
        name, arr = fw.output_array(e4)
        assert name == "float8_e4m3fn" and list(arr) == [0x38, 0xB8]
    assert fw.output_array(jnp.ones((2, 2), jnp.float16))[0] == "float16"


@_needs("tensorflow")
def test_tensorflow_values_and_bfloat16_bits():
    import tensorflow as tf

    x = fw.make_input("tensorflow", "float32", **F32_VIEW, storage=_storage(F32)).tensor
    np.testing.assert_array_equal(x.numpy(), EXPECTED)
    b = fw.make_input("tensorflow", "bfloat16", [6], [1], 0, _storage(BF16)).tensor
    assert b.dtype == tf.bfloat16
    name, arr = fw.output_array(tf.reverse(b, [0]))
    assert name == "bfloat16" and np.array_equal(arr, BF16[::-1])
