"""The precision mutation: an fp32 intermediate rounded to fewer mantissa bits, for a whole k grid at once.

A mutation of size ``k`` (a power of two) rounds an fp32 intermediate to nearest-even at
``23 - log2(k)`` stored mantissa bits, so its unit roundoff becomes ``k * u_fp32`` (u_fp32 = 2^-24,
the ``u_acc`` of the error model): ``k = 1`` is fp32 itself (the correct control, no change),
``k = 2^13`` keeps 10 bits (fp16's and TF32's mantissa), ``k = 2^16`` keeps 7 (bfloat16's), and
``k = 2^23`` keeps only the leading bit. The exponent range stays fp32's: this is precision loss
alone, never an overflow that fp16 storage would add.

Rounding (rather than a fixed ±k ulp nudge) is what a narrower accumulator or a narrower stored
intermediate actually does: its error is data-dependent, unbiased and at most half an ulp of the
narrower grid, so the measured k is the precision a real kernel may lose before gpuemu notices.
A ±k ulp nudge of one sign would be a bias that a long sum accumulates linearly, easier to catch
than the loss it stands for.

Mutated kernels evaluate every k of the grid in one pass: a tensor that has been through a
mutation site carries a leading dim, one slice per k (size 1 until the first site expands it), and
everything computed from it broadcasts over that dim. One forward pass thus yields the control and
every mutant, and the engine judges them all against one fp64 reference (``Engine.case_judge``).
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Sequence, Tuple

import torch

F32 = torch.float32
MANTISSA_BITS = 23  # fp32's stored mantissa bits
MAX_LOG2_K = MANTISSA_BITS  # k = 2^23 keeps one significant bit (the implicit one)


def default_grid(max_log2: int = 20) -> Tuple[int, ...]:
    """k = 1, 2, 4, ..., 2^max_log2 (2^16: a bfloat16 intermediate; beyond: what 16-bit outputs need)."""
    return tuple(1 << j for j in range(max_log2 + 1))


def log2_of(k: int) -> int:
    j = int(round(math.log2(k)))
    if k < 1 or (1 << j) != k or j > MAX_LOG2_K:
        raise ValueError(f"k must be a power of two from 1 to 2^{MAX_LOG2_K}, got {k}")
    return j


def round_mantissa(t: torch.Tensor, drop: int) -> torch.Tensor:
    """t (fp32) rounded to nearest-even with its lowest ``drop`` stored mantissa bits cleared (a
    single k; what :class:`Mutation` does per slice)."""
    if drop == 0:
        return t
    d = torch.tensor([drop], dtype=torch.int32)
    return _round_bits_(t.to(F32).clone(memory_format=torch.contiguous_format), d, *_constants(d))


def _constants(drop: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(2^drop, 2^(drop-1) - 1, ~(2^drop - 1)) as int32, each 0 / 0 / ~0 where drop is 0 (no change)."""
    on = drop > 0
    step = torch.where(on, torch.ones_like(drop) << drop, torch.zeros_like(drop))
    half_minus_1 = torch.where(on, (step >> 1) - 1, torch.zeros_like(drop))
    keep = ~torch.where(on, step - 1, torch.zeros_like(drop))
    return step, half_minus_1, keep


_EXPONENT = 0x7F800000


def _round_bits_(t: torch.Tensor, drop: torch.Tensor, step: torch.Tensor, half_minus_1: torch.Tensor,
                 keep: torch.Tensor) -> torch.Tensor:
    """Round-to-nearest-even on the bit pattern of t (contiguous fp32, rounded in place; the
    constants from _constants broadcast against it): add 2^(drop-1) - 1 plus the lowest kept bit
    (ties go to even), clear the dropped bits. This works on the sign-magnitude pattern of either
    sign (the int32 of a negative float is negative, and adding to it moves its magnitude bits the
    same way), and a finite value can round up to Inf, as a narrower format would. NaN and ±Inf
    (an exponent of all ones) are left as they are."""
    b = t.view(torch.int32)
    special = (b & _EXPONENT) == _EXPONENT  # (torch.isfinite is 10x slower here)
    kept = b.clone() if bool(special.any()) else None
    odd = torch.bitwise_and(b, step)
    odd >>= drop  # the lowest kept bit, 0 or 1
    b += odd
    b += half_minus_1
    b &= keep
    if kept is not None:
        b.copy_(torch.where(special, kept, b))
    return t


class Mutation:
    """Applies the k grid at a kernel's mutation sites.

    ``ks``: the grid (powers of two; 1 is the unmutated control). ``sites``: the site names to
    mutate (None: every site the kernel has). A kernel calls ``mut(t, "site")`` on an fp32
    intermediate: the result has a leading dim of ``len(ks)`` with slice i rounded for ``ks[i]``.
    ``t`` must already carry the k dim (size 1 or ``len(ks)``) unless ``fresh=True``, when it is a
    plain tensor that gets one. ``temporary=True`` lets the rounding write into ``t`` (a result
    nothing else refers to, such as ``acc + tile``) instead of a copy. A site not selected returns ``t`` unchanged (with a k dim of 1 when
    it was fresh), so the kernel reads the same either way. ``seen`` records every site called.
    """

    def __init__(self, ks: Sequence[int], sites: Optional[Iterable[str]] = None) -> None:
        self.ks = tuple(int(k) for k in ks)
        self.n = len(self.ks)
        self.drops = torch.tensor([log2_of(k) for k in self.ks], dtype=torch.int32)
        self.sites = None if sites is None else frozenset(sites)
        self.seen: set = set()
        self._constants = (self.drops,) + _constants(self.drops)
        self._by_rank: Dict[int, Tuple[torch.Tensor, ...]] = {}

    def active(self, site: str) -> bool:
        return self.sites is None or site in self.sites

    def lift(self, t: torch.Tensor) -> torch.Tensor:
        """A plain tensor with a k dim of 1 (it broadcasts against mutated ones)."""
        return t.unsqueeze(0)

    def __call__(self, t: torch.Tensor, site: str, fresh: bool = False, temporary: bool = False) -> torch.Tensor:
        self.seen.add(site)
        if fresh:
            t = t.unsqueeze(0)
        if not self.active(site):
            return t
        if t.dtype != F32:
            raise TypeError(f"mutation site '{site}': fp32 intermediates only, got {t.dtype}")
        if t.dim() == 0 or t.shape[0] not in (1, self.n):
            raise ValueError(f"mutation site '{site}': expected a leading k dim of 1 or {self.n}, got {tuple(t.shape)}")
        if self.n == 1 and self.ks[0] == 1:
            return t
        # rounded in place: a contiguous copy, or t itself when the caller says it is a temporary
        # nobody else holds (acc + tile) that already has every k slice
        if not (temporary and t.shape[0] == self.n and t.is_contiguous()):
            t = t.expand((self.n,) + tuple(t.shape[1:])).clone(memory_format=torch.contiguous_format)
        c = self._by_rank.get(t.dim())
        if c is None:
            shape = (self.n,) + (1,) * (t.dim() - 1)
            c = self._by_rank[t.dim()] = tuple(x.view(shape) for x in self._constants)
        return _round_bits_(t, *c)

    def slices(self, out: torch.Tensor) -> torch.Tensor:
        """An output with its k dim expanded to the grid (an output no active site reached is the
        same for every k)."""
        return out.expand((self.n,) + tuple(out.shape[1:]))
