"""gpuemu's dtypes: names, static facts, and exact conversions between float64 and each format.

Conversions round to nearest, ties to even, directly from float64 (never through float32), with
subnormals, signed zeros, NaN, infinities and overflow handled per format; ``docs/dtypes.md`` has
the rules (notably float8_e4m3fn's overflow: ``"to_nan"`` by default, like a framework cast, or
``"saturate"`` like a quantisation kernel). The work is done by the same C++ code the engine uses.

Dtypes are named by strings (``"bfloat16"``; aliases such as ``"bf16"`` are accepted); numpy dtypes
and torch dtypes are accepted wherever a dtype is expected.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal, Tuple, Union

import numpy as np

from ._native import core
from .errors import ValidationError

__all__ = [
    "DTypeInfo",
    "Overflow",
    "canonical",
    "from_bits",
    "info",
    "names",
    "round_to",
    "storage_numpy_dtype",
    "to_bits",
]

Overflow = Literal["to_nan", "saturate"]
DTypeLike = Union[str, np.dtype, type, Any]  # Any: torch.dtype, without importing torch


@dataclass(frozen=True)
class DTypeInfo:
    """Static facts about a dtype (``gpuemu::DTypeInfo``)."""

    name: str
    size: int  # bytes per element
    is_floating: bool
    mantissa_bits: int  # explicit fraction bits (0 for integers)
    unit_roundoff: float  # 2**-(mantissa_bits+1); 0 for integers
    max_finite: float
    lowest: float
    min_normal: float
    min_subnormal: float


def _is_torch_dtype(dtype: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(dtype, torch.dtype)


def canonical(dtype: DTypeLike) -> str:
    """The canonical gpuemu name of a dtype given as a name/alias, numpy dtype or torch dtype."""
    if isinstance(dtype, str):
        return core().canonical_dtype(dtype)
    if _is_torch_dtype(dtype):
        name = str(dtype)[len("torch.") :]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise ValidationError(f"not a dtype: {dtype!r}") from None
    if name in core().dtype_names():
        return name
    raise ValidationError(
        f"{dtype!r} has no gpuemu dtype (known: {', '.join(core().dtype_names())}); pass "
        "bfloat16 or fp8 data held in integer arrays as a (bits, 'bfloat16') pair"
    )


def names() -> Tuple[str, ...]:
    """Every dtype's canonical name."""
    return tuple(core().dtype_names())


def info(dtype: DTypeLike) -> DTypeInfo:
    """Static facts about ``dtype``."""
    return DTypeInfo(**core().dtype_info(canonical(dtype)))


def storage_numpy_dtype(dtype: DTypeLike) -> np.dtype:
    """The numpy dtype that holds ``dtype``'s storage: itself where numpy has it, else its bits
    (``uint16`` for bfloat16, ``uint8`` for fp8)."""
    name = canonical(dtype)
    if name == "bfloat16":
        return np.dtype(np.uint16)
    if name.startswith("float8_"):
        return np.dtype(np.uint8)
    return np.dtype(name)


def to_bits(values: Any, dtype: DTypeLike, overflow: Overflow = "to_nan") -> np.ndarray:
    """float64 values (any shape) rounded to a floating dtype, as its bits (uint8 for fp8, uint16
    for float16/bfloat16, uint32 for float32, uint64 for float64), same shape."""
    return core().to_bits(np.asarray(values, dtype=np.float64), canonical(dtype), overflow)


def from_bits(bits: Any, dtype: DTypeLike) -> np.ndarray:
    """The float64 values of a floating dtype's bits (an integer array of the dtype's width;
    signed arrays, such as a torch bfloat16 tensor viewed as int16, are reinterpreted)."""
    return core().from_bits(np.asarray(bits), canonical(dtype))


def round_to(values: Any, dtype: DTypeLike, overflow: Overflow = "to_nan") -> np.ndarray:
    """float64 values rounded to any dtype and returned as float64: exactly the values an element
    of that dtype would hold (integers: half to even, clamped; NaN becomes 0)."""
    return core().round_to(np.asarray(values, dtype=np.float64), canonical(dtype), overflow)
