"""``gpuemu.reference``: the fp64 reference oracle, in process.

Inputs cross into the C++ engine as the exact values the kernel received: each input is copied
once, with its own layout (shape, strides, offset, broadcast dims), into a gpuemu tensor of its
own dtype; bfloat16 and fp8 travel as their bits, never through float32.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ._native import core
from .dtypes import DTypeLike, canonical
from .errors import ValidationError

__all__ = ["op_schema", "oracle", "ops", "reference", "reload_catalogue", "set_oracle"]

ArrayPair = Tuple[np.ndarray, str]


def _torch_tensor_storage(name: str, t: Any, torch: Any) -> ArrayPair:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.layout != torch.strided:
        raise ValidationError(f"input '{name}': {t.layout} tensors are not supported; pass a dense one")
    # Lazy conjugation / negation flags are not in the storage: materialise them.
    if hasattr(t, "resolve_conj"):
        t = t.resolve_conj().resolve_neg()
    dtype = canonical(t.dtype)
    if dtype == "bfloat16":
        # Same item size: the view keeps shape, strides and offset; numpy sees the same memory.
        return t.view(torch.int16).numpy().view(np.uint16), dtype
    if dtype.startswith("float8_"):
        return t.view(torch.uint8).numpy(), dtype
    return t.numpy(), dtype


def _is_dtype_like(x: Any) -> bool:
    if isinstance(x, (str, np.dtype)):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.dtype)


def _input_storage(name: str, value: Any) -> ArrayPair:
    """An input as (array of the dtype's storage items, canonical dtype name)."""
    if isinstance(value, tuple) and len(value) == 2 and _is_dtype_like(value[1]):
        array, dtype = np.asarray(value[0]), canonical(value[1])
    else:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            return _torch_tensor_storage(name, value, torch)
        array = np.asarray(value)
        if array.dtype.kind == "O":
            raise ValidationError(
                f"input '{name}': cannot use an array of Python objects "
                "(use float64/float32/float16, an integer or bool array, or a (bits, dtype) pair)"
            )
        dtype = canonical(array.dtype)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array, dtype


def _attr_value(value: Any) -> Any:
    if _is_dtype_like(value) and not isinstance(value, str):
        return canonical(value)
    if isinstance(value, type) and issubclass(value, np.generic):  # np.float16
        return canonical(value)
    if isinstance(value, (list, tuple)):
        return [_attr_value(v) for v in value]
    return value


def reference(
    op: str, inputs: Mapping[str, Any], dtype: Optional[DTypeLike] = None, **attrs: Any
) -> Union[np.ndarray, Tuple[np.ndarray, ...]]:
    """The fp64 reference result of ``op`` on ``inputs``, computed from their exact values.

    ``inputs`` maps the op schema's input names to numpy arrays (float64, float32, float16, int64,
    int32, int16, int8, uint8, bool), CPU/CUDA torch tensors of any strides (bfloat16 and fp8
    through their bits), anything ``numpy.asarray`` accepts, or ``(bits, dtype)`` pairs for data
    held as raw bits (``(uint16_array, "bfloat16")``). ``dtype`` is the case dtype (by default
    that of the first input whose dtype follows the case); ``attrs`` are the op's attributes
    (defaults from the schema; torch/numpy dtypes are accepted where a dtype name is expected).

    Returns one float64 numpy array, or a tuple of them for ops with several outputs. Raises
    :class:`~gpuemu.errors.UnknownOpError` for an unknown op and
    :class:`~gpuemu.errors.ValidationError` for missing/unknown inputs, bad shapes or attrs.
    """
    if not isinstance(op, str):
        raise TypeError(f"op must be a str, not {type(op).__name__}")
    if not isinstance(inputs, Mapping):
        raise TypeError(f"inputs must be a mapping of input name to tensor, not {type(inputs).__name__}")
    converted: Dict[str, ArrayPair] = {}
    for name, value in inputs.items():
        if not isinstance(name, str):
            raise TypeError(f"input names must be str, not {type(name).__name__}")
        converted[name] = _input_storage(name, value)
    attr_values = {k: _attr_value(v) for k, v in attrs.items()}
    case_dtype = canonical(dtype) if dtype is not None else None
    outputs = core().reference(op, converted, attr_values, case_dtype)
    arrays = tuple(array for _name, array, _dtype in outputs)
    return arrays[0] if len(arrays) == 1 else arrays


def ops() -> List[str]:
    """The names of every op in the catalogue (built-in schemas and GPUEMU_SCHEMA_PATH), sorted."""
    return list(core().ops())


def op_schema(op: str) -> Dict[str, Any]:
    """An op's schema document as loaded, plus ``source_file``."""
    return dict(core().op_schema(op))


def reload_catalogue() -> None:
    """Reload the catalogue (after changing GPUEMU_SCHEMA_PATH or the schema files)."""
    core().reload_catalogue()


def set_oracle(backend: str, min_macs: Optional[int] = None) -> None:
    """Choose where this process's fp64 oracle runs: ``"cpu"`` (the default) or ``"cuda"``.

    ``"cuda"`` computes the GEMM-shaped references (matmul, bmm, linear, convolutions, their
    backward GEMMs) and attention blocks on the GPU in fp64 (docs/gpu.md, "The fp64 oracle on the
    GPU"); the results are the CPU's up to the order of fp64 sums, so no verdict changes. Raises
    :class:`gpuemu.GpuemuError` when the CUDA backend is not built, not found or finds no device.
    ``min_macs``: problems of at least this many multiply-adds go to the GPU (default 2**26).
    The daemon takes ``--oracle cuda`` or ``GPUEMU_ORACLE=cuda`` instead.
    """
    core().set_oracle(backend)
    if min_macs is not None:
        core().set_oracle_min_macs(int(min_macs))


def oracle() -> Dict[str, Any]:
    """Where this process's fp64 oracle runs, and what the GPU backend has computed so far:
    ``{"backend", "description", "min_macs", "gemms", "attention_blocks", "failures"}``."""
    return dict(core().oracle())
