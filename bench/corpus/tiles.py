"""What the corpus kernels share: how a Triton/CUDA kernel moves data, emulated in PyTorch on the CPU.

Every kernel loads tiles in the input dtype, upcasts them to fp32 (exact), does its math per tile
in fp32, rounds where a real kernel rounds (``rnd``: an intermediate stored in the input dtype) and
stores in the output dtype. Loads go through the tensor's strides (slicing the strided view), as a
kernel that is passed ``x.stride(0)``/``x.stride(1)`` does; the contiguity bugs read flat memory
(``flat_rows``) instead.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch

F32 = torch.float32


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def load(x: torch.Tensor) -> torch.Tensor:
    """A tile loaded and upcast to fp32 (exact for fp16/bf16/fp32)."""
    return x.to(F32)


def rnd(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An fp32 value stored in ``dtype`` and read back (rounding to nearest even)."""
    return t.to(dtype).to(F32)


def rows_last(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The 2-D input viewed with the reduced dim last (a strided view, no copy)."""
    d = dim % x.dim()
    return x if d == x.dim() - 1 else x.transpose(d, x.dim() - 1)


def tiles(n: int, block: int):
    """(start, end) of each tile along a dim of size n, the last one partial."""
    for s in range(0, n, block):
        yield s, min(s + block, n)


def padded_tile(x: torch.Tensor, s: int, block: int, other: float) -> torch.Tensor:
    """A [R, block] tile of fp32 values starting at column s; lanes past the row end hold ``other``
    (what ``tl.load(ptr, mask=cols < N, other=other)`` returns)."""
    r, n = x.shape
    e = min(s + block, n)
    t = torch.full((r, block), other, dtype=F32)
    t[:, : e - s] = load(x[:, s:e])
    return t


def flat_rows(x: torch.Tensor) -> torch.Tensor:
    """The 2-D input read the way a kernel that computes ``x_ptr + row * N + col`` reads it: the
    memory after ``x.data_ptr()`` as if the tensor were contiguous. Memory past the end of the
    storage reads as zeros (on a GPU: whatever lies there)."""
    r, n = x.shape
    storage = torch.as_strided(x, (x.storage().size() - x.storage_offset(),), (1,), x.storage_offset())
    flat = torch.zeros(r * n, dtype=x.dtype)
    m = min(r * n, storage.numel())
    flat[:m] = storage[:m]
    return flat.view(r, n)


def out_like(x: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous output of x's shape and dtype (kernels allocate ``torch.empty_like``)."""
    return torch.empty(x.shape, dtype=x.dtype)


def dtype_of(name_or_tensor) -> torch.dtype:
    return name_or_tensor.dtype if isinstance(name_or_tensor, torch.Tensor) else getattr(torch, name_or_tensor)


def attn_scale(scale, d: int) -> float:
    return float(scale) if scale is not None else 1.0 / math.sqrt(d)


def shape2(x: torch.Tensor) -> Tuple[int, int]:
    return int(x.shape[0]), int(x.shape[1])


def wtile(w, s: int, e: int):
    """Columns [s, e) of an optional norm weight in fp32 (absent: 1, as ``weight=None``)."""
    return 1.0 if w is None else load(w[s:e])


def btile(b, s: int, e: int):
    """Columns [s, e) of an optional norm bias in fp32 (absent: 0)."""
    return 0.0 if b is None else load(b[s:e])
