"""gpuemu's reproducible random numbers, in pure Python, bit for bit the same as the C++ engine.

This is the algorithm of ``engine/include/gpuemu/engine/rng.hpp`` / ``engine/core/rng.cpp``, step for step
(documented in ``docs/rng.md``): xorshift128+ seeded through splitmix64, named sub-streams derived
from ``(seed, domain)`` with FNV-1a over the domain's UTF-8 bytes, and value transforms that use only
IEEE-exact operations in a fixed order (Python floats are IEEE doubles and CPython never fuses a
multiply and an add, so the same expression gives the same bits as the C++ built with
``-ffp-contract=off``). ``tests/data/rng_vectors.json``, generated from the C++, pins both.

Integers are Python ints kept in ``[0, 2**64)``; every C++ ``uint64_t`` wrap-around is a ``& MASK64``
here.
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple, Union

__all__ = [
    "MASK64",
    "Rng",
    "case_seed",
    "derive_seed",
    "det_log",
    "fnv1a64",
    "splitmix64_next",
]

MASK64 = (1 << 64) - 1

_SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
_SPLITMIX_MUL1 = 0xBF58476D1CE4E5B9
_SPLITMIX_MUL2 = 0x94D049BB133111EB
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_TWO_POW_M53 = 2.0**-53
_SQRT_HALF = 0.70710678118654752
_LN2 = 0.6931471805599453


def _u64(value: int, what: str = "seed") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MASK64:
        raise ValueError(f"{what} must be in [0, 2**64), got {value}")
    return value


def splitmix64_next(state: int) -> Tuple[int, int]:
    """One splitmix64 step: returns ``(new_state, output)`` (C++ advances ``state`` in place)."""
    state = (_u64(state, "state") + _SPLITMIX_GAMMA) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * _SPLITMIX_MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _SPLITMIX_MUL2) & MASK64
    return state, z ^ (z >> 31)


def fnv1a64(data: bytes, seed: int = _FNV_OFFSET) -> int:
    """64-bit FNV-1a of ``data`` (the same function as ``gpuemu::fnv1a64``)."""
    h = _u64(seed)
    for byte in data:
        h ^= byte
        h = (h * _FNV_PRIME) & MASK64
    return h


def _domain_bytes(domain: Union[str, bytes]) -> bytes:
    if isinstance(domain, str):
        return domain.encode("utf-8")
    if isinstance(domain, (bytes, bytearray, memoryview)):
        return bytes(domain)
    raise TypeError(f"domain must be str or bytes, got {type(domain).__name__}")


def derive_seed(parent: int, domain: Union[str, bytes]) -> int:
    """The seed of the sub-stream named ``domain`` under ``parent``.

    ``splitmix64(parent XOR fnv1a64(utf8(domain)))``: independent of which other streams were
    derived and of the order they were derived in.
    """
    state = _u64(parent, "parent") ^ fnv1a64(_domain_bytes(domain))
    return splitmix64_next(state)[1]


def case_seed(master: int, index: int) -> int:
    """The seed of case ``index`` under a fuzz run's master seed: ``derive_seed(master, "case:<i>")``."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"case index must be a non-negative int, got {index!r}")
    return derive_seed(master, f"case:{index}")


def det_log(x: float) -> float:
    """Natural logarithm of a finite ``x > 0`` with gpuemu's own fixed sequence of IEEE operations.

    Same result bits as ``gpuemu::det_log`` on every machine (it is not ``math.log``: it may differ
    from it by a few ulp). Like the C++, it does not check its argument: for ``x <= 0``, Inf or NaN
    the result is meaningless.
    """
    x = float(x)
    m, e = math.frexp(x)  # x = m * 2**e, m in [0.5, 1)
    if m < _SQRT_HALF:
        m = m * 2.0
        e = e - 1
    # log(m) = 2 atanh(z), z = (m-1)/(m+1); Horner over 21 odd terms, 1/41 first.
    z = (m - 1.0) / (m + 1.0)
    z2 = z * z
    p = 1.0 / 41.0
    for k in range(19, -1, -1):
        p = p * z2 + 1.0 / float(2 * k + 1)
    return float(e) * _LN2 + 2.0 * z * p


class Rng:
    """xorshift128+ seeded through splitmix64; the same stream as ``gpuemu::Rng(seed)``."""

    __slots__ = ("_s0", "_s1")

    def __init__(self, seed: int) -> None:
        state, s0 = splitmix64_next(_u64(seed))
        state, s1 = splitmix64_next(state)
        if s0 == 0 and s1 == 0:  # the all-zero state is a fixed point
            s0 = 1
        self._s0 = s0
        self._s1 = s1

    @classmethod
    def substream(cls, parent: int, domain: Union[str, bytes]) -> "Rng":
        """The stream named ``domain`` under ``parent``: ``Rng(derive_seed(parent, domain))``."""
        return cls(derive_seed(parent, domain))

    @property
    def state(self) -> Tuple[int, int]:
        """The two 64-bit state words ``(s0, s1)``."""
        return self._s0, self._s1

    def __repr__(self) -> str:
        return f"Rng(state=(0x{self._s0:016x}, 0x{self._s1:016x}))"

    def next_u64(self) -> int:
        """The next raw 64-bit draw."""
        s1 = self._s0
        s0 = self._s1
        result = (s0 + s1) & MASK64
        self._s0 = s0
        s1 ^= (s1 << 23) & MASK64
        self._s1 = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5)
        return result

    def uniform01(self) -> float:
        """Uniform in [0, 1): the top 53 bits of one draw, times 2**-53."""
        return float(self.next_u64() >> 11) * _TWO_POW_M53

    def uniform(self, lo: float, hi: float) -> float:
        """Uniform in [lo, hi): ``lo + (hi - lo) * uniform01()``."""
        lo = float(lo)
        hi = float(hi)
        return lo + (hi - lo) * self.uniform01()

    def bounded(self, n: int) -> int:
        """Uniform integer in [0, n) for 1 <= n < 2**64, unbiased (rejection); 0 for n <= 1."""
        n = _u64(n, "n")
        if n <= 1:
            return 0
        threshold = ((1 << 64) - n) % n  # 2**64 mod n
        while True:
            r = self.next_u64()
            if r >= threshold:
                return r % n

    def integer(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi] inclusive (int64 bounds); ``lo`` when ``hi <= lo``."""
        for name, v in (("lo", lo), ("hi", hi)):
            if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v < (1 << 63):
                raise ValueError(f"{name} must be an int64, got {v!r}")
        if hi <= lo:
            return lo
        span = (hi - lo + 1) & MASK64
        if span == 0:  # the whole int64 range
            return _to_int64(self.next_u64())
        return _to_int64(((lo & MASK64) + self.bounded(span)) & MASK64)

    def normal(self) -> float:
        """Standard normal: Marsaglia's polar method with ``det_log``."""
        while True:
            u = 2.0 * self.uniform01() - 1.0
            v = 2.0 * self.uniform01() - 1.0
            s = u * u + v * v
            if 0.0 < s < 1.0:
                return u * math.sqrt(-2.0 * det_log(s) / s)

    def chance(self, num: int, den: int) -> bool:
        """True with probability num/den: ``bounded(den) < num``."""
        return self.bounded(den) < _u64(num, "num")

    def weighted(self, weights: Sequence[int]) -> int:
        """An index drawn with probability proportional to its integer weight (sum > 0)."""
        ws = [_u64(w, "weight") for w in weights]
        if not ws:
            raise ValueError("weighted() needs at least one weight")
        total = sum(ws) & MASK64  # C++ sums in uint64_t
        r = self.bounded(total)
        for i, w in enumerate(ws):
            if r < w:
                return i
            r -= w
        return len(ws) - 1

    def u64s(self, count: int) -> List[int]:
        """``count`` raw draws (a convenience; the same as calling ``next_u64`` that often)."""
        return [self.next_u64() for _ in range(count)]


def _to_int64(u: int) -> int:
    return u - (1 << 64) if u >= (1 << 63) else u
