"""Framework adapters: gpuemu wire tensors <-> numpy, PyTorch, CuPy, JAX and TensorFlow tensors.

One place for what the client (``client.py``), the in-process fuzzer (``inprocess.py``) and the
daemon's script runner (``_script_runner.py``) each need: a case's input storage handed to a
kernel as a tensor of its framework, with the case's real layout, and a kernel's output brought
back as a contiguous numpy array with its gpuemu dtype.

This module imports only the standard library and numpy, and nothing of the ``gpuemu`` package
at import time: the script runner loads it by file path, in a process that must not load the
compiled core. Each framework is imported lazily, the first time it is asked for; one that is not
installed raises :class:`FrameworkMissing` (a ``gpuemu.ValidationError`` inside the package)
naming the package to install.

Inputs and copies:

- numpy: a view over the wire storage (zero copy).
- torch (CPU): ``torch.from_numpy`` over the storage plus ``as_strided`` (zero copy); another
  device gets one copy of the storage there, with the same strides.
- CuPy: one host-to-device copy of the storage, viewed with the case's strides.
- JAX and TensorFlow have no strided views: a non-contiguous input is materialised contiguous
  (one copy), a contiguous one crosses through DLPack (zero copy on the CPU where the framework
  accepts the buffer). Their arrays are immutable, so the mutation check does not apply.

bfloat16 and fp8 cross through their bits where the framework has the dtype (torch bfloat16 and
float8 types, JAX's ``jnp.bfloat16``/``jnp.float8_*``, TensorFlow's ``tf.bfloat16``); elsewhere
(numpy, CuPy, an older torch without fp8) they arrive as float32 arrays holding the exact values.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

try:  # inside the package: the package's exception; loaded by path (script runner): a ValueError
    from .errors import ValidationError as _Base
except ImportError:  # pragma: no cover - exercised by the script runner
    _Base = ValueError  # type: ignore[misc,assignment]

__all__ = [
    "BITS",
    "FRAMEWORKS",
    "FrameworkMissing",
    "Input",
    "NUMPY_NATIVE",
    "decode_to_f32",
    "make_input",
    "memory_range",
    "output_array",
    "require",
]

FRAMEWORKS = ("numpy", "torch", "cupy", "jax", "tensorflow")
_PACKAGE = {"numpy": "numpy", "torch": "torch", "cupy": "cupy (cupy-cuda12x)", "jax": "jax",
            "tensorflow": "tensorflow"}

# gpuemu dtype name -> numpy dtype, for the dtypes numpy holds natively.
NUMPY_NATIVE: Dict[str, np.dtype] = {
    name: np.dtype(code) for name, code in (
        ("float64", "<f8"), ("float32", "<f4"), ("float16", "<f2"), ("int8", "i1"), ("int16", "<i2"),
        ("int32", "<i4"), ("int64", "<i8"), ("uint8", "u1"), ("bool", "?"))
}
# Dtypes numpy has no type for -> the numpy dtype of their bits.
BITS: Dict[str, np.dtype] = {"bfloat16": np.dtype("<u2"), "float8_e4m3fn": np.dtype("u1"),
                             "float8_e5m2": np.dtype("u1")}

RoundBits = Callable[[np.ndarray, str], np.ndarray]  # float values -> bits of a BITS dtype


class FrameworkMissing(_Base):  # type: ignore[misc,valid-type]
    """A framework was asked for that is not installed (or not supported)."""

    code = "invalid_argument"


def require(framework: str) -> Any:
    """The framework's module, imported now; FrameworkMissing naming the package when absent."""
    if framework not in FRAMEWORKS:
        raise FrameworkMissing(f"unknown framework {framework!r} (one of {', '.join(FRAMEWORKS)})")
    if framework == "numpy":
        return np
    try:
        if framework == "jax":
            import jax  # noqa: F401
            import jax.numpy  # noqa: F401
            return sys.modules["jax"]
        return __import__(framework)
    except ImportError as exc:
        raise FrameworkMissing(
            f"framework {framework!r} needs the Python package {_PACKAGE[framework]}, which is not "
            f"installed in this interpreter ({sys.executable}): {exc}") from None


# ---------------------------------------------------------------------------------------------
# bfloat16 / fp8 bits -> exact float32 values (pure numpy)

_FP8_TABLES: Dict[str, np.ndarray] = {}


def _fp8_table(dtype: str) -> np.ndarray:
    """float32 value of each of the 256 bit patterns (exact)."""
    table = _FP8_TABLES.get(dtype)
    if table is None:
        bits = np.arange(256, dtype=np.uint32)
        if dtype == "float8_e5m2":  # the upper byte of an IEEE binary16
            table = (bits.astype(np.uint16) << 8).view(np.float16).astype(np.float32)
        else:  # float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN
            sign = np.where(bits & 0x80, -1.0, 1.0)
            exp = (bits >> 3) & 0xF
            man = (bits & 0x7).astype(np.float64)
            mag = np.where(exp == 0, man * 2.0 ** -9, (1.0 + man / 8.0) * np.exp2(exp.astype(np.float64) - 7.0))
            mag = np.where((bits & 0x7F) == 0x7F, np.nan, mag)
            table = np.copysign(mag, sign).astype(np.float32)
        _FP8_TABLES[dtype] = table
    return table


def decode_to_f32(bits: np.ndarray, dtype: str) -> np.ndarray:
    """The exact float32 values of bfloat16 / fp8 bits (any integer array of the dtype's width)."""
    bits = np.asarray(bits)
    if dtype == "bfloat16":
        return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype in ("float8_e4m3fn", "float8_e5m2"):
        return _fp8_table(dtype)[bits.view(np.uint8)]
    raise FrameworkMissing(f"{dtype!r} is not a bfloat16/fp8 dtype")


# ---------------------------------------------------------------------------------------------
# Inputs


class Input:
    """One input as the kernel sees it.

    ``tensor`` is what ``run_op`` gets. ``storage`` is the wire storage (uint8); ``own`` is None
    when ``tensor`` views ``storage`` itself (a kernel's writes land there), else the framework
    storage the tensor views (a device copy, or float32 values of bf16/fp8 bits), from which
    :meth:`host_storage` reads what the kernel left; ``immutable`` for JAX/TensorFlow arrays.
    """

    __slots__ = ("dtype", "shape", "strides", "offset", "storage", "tensor", "own", "immutable", "framework")

    def __init__(self, framework: str, dtype: str, shape, strides, offset: int, storage: np.ndarray,
                 tensor: Any, own: Any = None, immutable: bool = False):
        self.framework = framework
        self.dtype = dtype
        self.shape = [int(s) for s in shape]
        self.strides = [int(s) for s in strides]
        self.offset = int(offset)
        self.storage = storage
        self.tensor = tensor
        self.own = own
        self.immutable = immutable

    def host_storage(self) -> np.ndarray:
        """The storage as it is now, as a host numpy array (values of the framework's dtype)."""
        if self.own is None:
            return self.storage
        return _to_host(self.own)


def _base_numpy(dtype: str, storage: np.ndarray, bits_ok: Tuple[str, ...] = ()) -> Tuple[np.ndarray, bool]:
    """(the storage as a flat numpy array, whether it is a decoded float32 copy)."""
    if dtype in NUMPY_NATIVE:
        return storage.view(NUMPY_NATIVE[dtype]) if storage.size else np.empty(0, NUMPY_NATIVE[dtype]), False
    if dtype in BITS:
        bits = storage.view(BITS[dtype]) if storage.size else np.empty(0, BITS[dtype])
        if dtype in bits_ok:
            return bits, False
        return decode_to_f32(bits, dtype), True
    raise FrameworkMissing(f"unknown dtype {dtype!r}")


def _strided(base: np.ndarray, shape, strides, offset: int) -> np.ndarray:
    if base.size == 0:
        return np.zeros(tuple(int(s) for s in shape), dtype=base.dtype)
    item = base.dtype.itemsize
    return np.ndarray(tuple(int(s) for s in shape), dtype=base.dtype, buffer=base, offset=int(offset) * item,
                      strides=tuple(int(s) * item for s in strides))


def _numpy_input(dtype, shape, strides, offset, storage, device) -> Input:
    if device not in (None, "cpu"):
        raise FrameworkMissing(f"framework 'numpy' runs on the CPU only (device {device!r} asked)")
    base, decoded = _base_numpy(dtype, storage)
    return Input("numpy", dtype, shape, strides, offset, storage, _strided(base, shape, strides, offset),
                 base if decoded else None)


def _torch_dtypes(torch: Any) -> Dict[str, Any]:
    out = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
           "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
           "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, name):
            out[name] = getattr(torch, name)
    return out


def _torch_input(dtype, shape, strides, offset, storage, device) -> Input:
    torch = require("torch")
    have = _torch_dtypes(torch)
    own = None
    if dtype in have:
        # bfloat16 bits through int16: torch.from_numpy refuses uint16 before torch 2.3
        carrier = {"bfloat16": torch.int16}.get(dtype, torch.uint8 if dtype in BITS else have[dtype])
        base = (torch.from_numpy(storage).view(carrier) if storage.size else torch.empty(0, dtype=carrier))
        if carrier != have[dtype]:
            base = base.view(have[dtype])
    else:  # fp8 on a torch without those dtypes: exact float32 values
        base = torch.from_numpy(_base_numpy(dtype, storage)[0])
        own = base
    if device and torch.device(device).type != "cpu":
        base = base.to(device)
        own = base
    t = base.as_strided([int(s) for s in shape], [int(s) for s in strides], int(offset))
    return Input("torch", dtype, shape, strides, offset, storage, t, own)


def _cupy_input(dtype, shape, strides, offset, storage, device) -> Input:
    cp = require("cupy")
    base, _ = _base_numpy(dtype, storage)  # CuPy has no bfloat16 / fp8: float32 values
    with _cupy_device(cp, device):
        dev = cp.asarray(base)  # the one host-to-device copy of the storage
        if dev.size == 0:
            t = cp.zeros(tuple(int(s) for s in shape), dtype=dev.dtype)
        else:
            item = dev.dtype.itemsize
            t = cp.lib.stride_tricks.as_strided(dev[int(offset):], tuple(int(s) for s in shape),
                                                tuple(int(s) * item for s in strides))
    return Input("cupy", dtype, shape, strides, offset, storage, t, dev)


def _cupy_device(cp: Any, device: Optional[str]) -> Any:
    if device in (None, "", "cuda", "gpu"):
        return cp.cuda.Device()
    kind, _, idx = str(device).partition(":")
    if kind not in ("cuda", "gpu"):
        raise FrameworkMissing(f"framework 'cupy' runs on CUDA devices only (device {device!r} asked)")
    return cp.cuda.Device(int(idx or 0))


def _contiguous_view(dtype, shape, strides, offset, storage, bits_ok) -> Tuple[np.ndarray, bool]:
    """The case's view as a C-contiguous numpy array (the storage's own bytes when already so)."""
    base, decoded = _base_numpy(dtype, storage, bits_ok)
    view = _strided(base, shape, strides, offset)
    return _contiguous(view), decoded


def _from_dlpack(fn: Callable[[Any], Any], arr: np.ndarray) -> Any:
    """fn over arr's DLPack capsule (zero copy where the framework accepts it), else None."""
    if not arr.flags.c_contiguous or arr.dtype.kind not in "fiub" or not hasattr(arr, "__dlpack__"):
        return None
    try:
        return fn(arr.__dlpack__())
    except Exception:  # noqa: BLE001 (alignment, read-only, an old framework: fall back to a copy)
        return None


def _jax_input(dtype, shape, strides, offset, storage, device) -> Input:
    jax = require("jax")
    jnp = jax.numpy
    typed = {"bfloat16": getattr(jnp, "bfloat16", None), "float8_e4m3fn": getattr(jnp, "float8_e4m3fn", None),
             "float8_e5m2": getattr(jnp, "float8_e5m2", None)}
    bits_ok = tuple(k for k, v in typed.items() if v is not None)
    arr, _ = _contiguous_view(dtype, shape, strides, offset, storage, bits_ok)
    if dtype in bits_ok:
        t = jnp.asarray(arr.view(typed[dtype]))  # the bits, reinterpreted (ml_dtypes), never rounded
    else:
        t = _from_dlpack(jax.dlpack.from_dlpack, arr)
        if t is None:
            t = jnp.asarray(arr)
    if device:
        kind, _, idx = str(device).partition(":")
        kind = {"cuda": "gpu"}.get(kind, kind)
        t = jax.device_put(t, jax.devices(kind)[int(idx or 0)])
    return Input("jax", dtype, shape, strides, offset, storage, t, immutable=True)


def _tf_input(dtype, shape, strides, offset, storage, device) -> Input:
    tf = require("tensorflow")
    typed = {"bfloat16": tf.bfloat16}
    exp = getattr(tf.dtypes, "experimental", None)
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if exp is not None and hasattr(exp, name):
            typed[name] = getattr(exp, name)
    bits_ok = tuple(typed)
    arr, _ = _contiguous_view(dtype, shape, strides, offset, storage, bits_ok)
    with tf.device(_tf_device(device)):
        if dtype in typed:
            t = tf.convert_to_tensor(arr.view(typed[dtype].as_numpy_dtype))  # the bits, reinterpreted
        else:
            t = _from_dlpack(tf.experimental.dlpack.from_dlpack, arr)
            if t is None:
                t = tf.convert_to_tensor(arr)
        if device:
            t = tf.identity(t)  # placed on the device asked for
    return Input("tensorflow", dtype, shape, strides, offset, storage, t, immutable=True)


def _tf_device(device: Optional[str]) -> str:
    if not device:
        return "/CPU:0"
    kind, _, idx = str(device).partition(":")
    kind = {"cuda": "GPU", "gpu": "GPU", "cpu": "CPU"}.get(kind.lower(), kind.upper())
    return f"/{kind}:{int(idx or 0)}"


_MAKERS = {"numpy": _numpy_input, "torch": _torch_input, "cupy": _cupy_input, "jax": _jax_input,
           "tensorflow": _tf_input}


def make_input(framework: str, dtype: str, shape, strides, offset: int, storage: np.ndarray,
               device: Optional[str] = None) -> Input:
    """An input of ``framework`` on ``device`` over a case's wire storage (a uint8 numpy array of
    the whole storage; ``shape``/``strides``/``offset`` in elements)."""
    if framework not in _MAKERS:
        raise FrameworkMissing(f"unknown framework {framework!r} (one of {', '.join(FRAMEWORKS)})")
    return _MAKERS[framework](dtype, shape, strides, offset, storage, device)


# ---------------------------------------------------------------------------------------------
# Outputs


def _family(v: Any) -> str:
    """Which framework a value belongs to, from its type's module (no import needed)."""
    mod = type(v).__module__.split(".")[0]
    if mod == "torch" and hasattr(v, "data_ptr"):
        return "torch"
    if mod == "cupy":
        return "cupy"
    if mod in ("jax", "jaxlib"):
        return "jax"
    if mod == "tensorflow" or (mod.startswith("tensorflow") and hasattr(v, "numpy")):
        return "tensorflow"
    return "numpy"


def _to_host(v: Any) -> np.ndarray:
    """A framework tensor's values as a host numpy array (bf16/fp8 as ml_dtypes arrays where the
    framework has them; torch's as their bits, see _torch_host)."""
    fam = _family(v)
    if fam == "torch":
        return _torch_host(v)[1]
    if fam == "cupy":
        return v.get()
    if fam == "tensorflow":
        return v.numpy()
    if fam == "jax":
        return np.asarray(v)
    if not isinstance(v, np.ndarray) and hasattr(v, "__dlpack__") and hasattr(np, "from_dlpack"):
        try:  # any other DLPack producer on the CPU
            return np.from_dlpack(v)
        except Exception:  # noqa: BLE001
            pass
    return np.asarray(v)


def _torch_host(t: Any) -> Tuple[Optional[str], np.ndarray]:
    """(gpuemu dtype where the numpy array holds its bits, else None; host numpy array)."""
    torch = sys.modules["torch"]
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        return "bfloat16", t.contiguous().view(torch.int16).numpy().view(np.uint16)
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if getattr(torch, name, None) is not None and t.dtype == getattr(torch, name):
            return name, t.contiguous().view(torch.uint8).numpy()
    if t.dtype not in (torch.float64, torch.float32, torch.float16, torch.int8, torch.int16, torch.int32,
                       torch.int64, torch.uint8, torch.bool):
        raise TypeError(f"output dtype {t.dtype} is not one gpuemu takes")
    return None, t.numpy()


def _contiguous(arr: np.ndarray) -> np.ndarray:
    """C-contiguous, keeping a 0-d array 0-d (np.ascontiguousarray returns at least 1-d)."""
    return np.ascontiguousarray(arr) if arr.ndim else np.array(arr, copy=True)


def output_array(v: Any, want: Optional[str] = None,
                 round_bits: Optional[RoundBits] = None) -> Tuple[str, np.ndarray]:
    """(gpuemu dtype, C-contiguous little-endian numpy array) of one kernel output.

    ``v``: a numpy array (or anything ``np.asarray`` takes), a torch / CuPy / JAX / TensorFlow
    tensor, a DLPack producer, or an explicit ``(array, "bfloat16")`` pair. ``want`` is the dtype
    the op's schema expects for this output. bfloat16/fp8 tensors of a framework come back as
    their bits (an ml_dtypes array of JAX/TensorFlow too); integer arrays of the right width in a
    bfloat16/fp8 case are taken as bits; float arrays there are rounded to the dtype by
    ``round_bits`` (the client, once, from their values), or kept as they are when it is None
    (the engine judges float outputs of such cases as they are).
    """
    if v is None:
        raise TypeError("run_op returned None where an output was expected")
    name: Optional[str] = None
    explicit = isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str)
    if explicit:
        v, want = v
        if want not in NUMPY_NATIVE and want not in BITS:
            raise TypeError(f"({type(v).__name__}, {want!r}): unknown dtype {want!r}")
    if _family(v) == "torch":
        name, arr = _torch_host(v)
    else:
        arr = _to_host(v)
    if arr.dtype == np.dtype(object):
        raise TypeError(f"run_op returned a {type(v).__name__}, not an array or tensor")
    if name is None and arr.dtype.name in BITS and arr.dtype.itemsize == BITS[arr.dtype.name].itemsize:
        name = arr.dtype.name  # ml_dtypes bfloat16 / float8 (JAX, TensorFlow): their bits
        arr = arr.view(BITS[name])
    arr = _contiguous(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if name is not None:
        return name, arr
    if want in BITS:
        if arr.dtype == BITS[want]:
            return want, arr  # the dtype's bits
        if arr.dtype.kind == "f" and round_bits is not None:
            return want, _contiguous(round_bits(arr, want))
        if arr.dtype.kind == "f" and explicit:
            arr = arr.astype(np.float32)  # float values of an explicit bf16/fp8 pair: rounded by the receiver
    elif explicit and want in NUMPY_NATIVE and arr.dtype != NUMPY_NATIVE[want]:
        arr = arr.astype(NUMPY_NATIVE[want])
    for n, code in NUMPY_NATIVE.items():
        if arr.dtype == code:
            return n, arr
    raise TypeError(f"output dtype {arr.dtype} is not one gpuemu takes ({', '.join(NUMPY_NATIVE)}; "
                    "bfloat16/fp8 as a framework dtype, as bits, or as float values)")


try:  # numpy >= 2 moved it
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # numpy 1.x
    _byte_bounds = np.byte_bounds


def memory_range(v: Any) -> Optional[Tuple[int, int]]:
    """[lo, hi) addresses of the memory a tensor's storage spans (None when unknown or when the
    framework's arrays are immutable): the aliasing check of client-side kernels."""
    try:
        fam = _family(v)
        if fam == "torch":
            if hasattr(v, "untyped_storage"):
                s = v.untyped_storage()
                return (s.data_ptr(), s.data_ptr() + s.nbytes())
            s = v.storage()
            return (s.data_ptr(), s.data_ptr() + s.size() * v.element_size())
        if fam == "cupy":
            mem = v.data.mem
            return (mem.ptr, mem.ptr + mem.size)
        if fam in ("jax", "tensorflow"):
            return None
        arr = np.asarray(v)
        while isinstance(arr.base, np.ndarray):
            arr = arr.base
        return _byte_bounds(arr)
    except Exception:  # noqa: BLE001 (aliasing is a best-effort check)
        return None
