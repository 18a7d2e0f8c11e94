"""How the mutated kernels accumulate: per-lane sums, blocked scans and K-loops, each add rounded at
a mutation site (rounding.Mutation) so that a mutant's accumulator has the precision of its k.

Every function takes tensors that may carry the k dim (leading, size 1 or len(grid)) and returns
one that does. At k = 1 the mutation is the identity and these are ordinary fp32 kernels — the
correct controls the harness measures its mutants against.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from bench.power.rounding import F32, Mutation

LANES = 256   # per-lane accumulators of a row reduction (a Triton BLOCK of a looped sum)
SCAN_BLOCK = 256  # the tile of a blocked scan (its carry passes from tile to tile)
BLOCK_K = 32  # the K tile of a GEMM / im2col convolution


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def lane_sum(t: torch.Tensor, mut: Mutation, site: str, lanes: int = LANES) -> torch.Tensor:
    """Sum over the last dim as a looped kernel does: ``lanes`` accumulators (``acc += tile`` per
    tile of the row, each add rounded at ``site``), then a tree across the lanes (each level
    rounded). ``t`` carries the k dim; the result has the last dim removed. Padded lanes hold 0,
    and adding 0 to a rounded value leaves it as it is."""
    n = t.shape[-1]
    width = min(lanes, next_pow2(max(n, 1)))
    tiles = -(-n // width) if n else 1
    tp = F.pad(t, (0, tiles * width - n)).reshape(t.shape[:-1] + (tiles, width))
    acc = mut(tp[..., 0, :], site)
    for j in range(1, tiles):
        acc = mut(acc + tp[..., j, :], site, temporary=True)
    while acc.shape[-1] > 1:
        h = acc.shape[-1] // 2
        acc = mut(acc[..., :h] + acc[..., h:], site, temporary=True)
    return acc[..., 0]


def blocked_scan(t: torch.Tensor, mut: Mutation, site: str, block: int = SCAN_BLOCK) -> torch.Tensor:
    """Inclusive prefix sum over the last dim as a blocked scan kernel: each ``block``-wide tile
    scanned in fp32 (tl.cumsum), then out = carry + local prefix and carry = the tile's last out,
    the tile's outputs and so the carry rounded at ``site`` (a running sum kept in fewer bits
    from tile to tile). ``t`` carries the k dim."""
    n = t.shape[-1]
    outs = []
    carry = None
    for s in range(0, max(n, 1), block):
        local = torch.cumsum(t[..., s:s + block], dim=-1)
        out = mut(local if carry is None else carry[..., None] + local, site, temporary=True)
        carry = out[..., -1]
        outs.append(out)
    return torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]


def k_loop(a: torch.Tensor, b: torch.Tensor, mut: Mutation, site: str, operand_site: Optional[str] = None,
           block_k: int = BLOCK_K,
           product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.matmul) -> torch.Tensor:
    """A GEMM's K loop: ``acc += a[..., :, kt] @ b[..., kt, :]`` over ``block_k``-wide tiles, each
    tile product in fp32 (the MMA) and each accumulate rounded at ``site``. ``operand_site``
    rounds the operands first (a TF32-like operand precision). ``a`` and ``b`` are fp32 without the
    k dim; the result has it."""
    if operand_site is not None and mut.active(operand_site):
        a, b = mut(a, operand_site, fresh=True), mut(b, operand_site, fresh=True)
    else:
        a, b = mut.lift(a), mut.lift(b)
    a, b = _align(a, b), _align(b, a)  # batch dims broadcast after the k dim, not against it
    k = a.shape[-1]
    acc = None
    for s in range(0, max(k, 1), block_k):
        p = product(a[..., s:s + block_k], b[..., s:s + block_k, :])
        acc = mut(p, site, temporary=True) if acc is None else mut(acc + p, site, temporary=True)
    return acc


def _align(t: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """t with unit dims inserted after its k dim up to other's rank."""
    extra = other.dim() - t.dim()
    return t.reshape(t.shape[:1] + (1,) * extra + t.shape[1:]) if extra > 0 else t


def move_last(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x with ``dim`` moved last (a view)."""
    return x.movedim(dim, -1)


def move_back(y: torch.Tensor, dim: int, ndim: int) -> torch.Tensor:
    """Undo move_last on a result that gained the leading k dim (``dim`` of the ``ndim``-dim input)."""
    return y.movedim(-1, (dim % ndim) + 1)
