"""The growth of an fp32 sum's rounding error over its terms, vectorized over the lines of a tensor.

The same rules as the catalogue's hand-written references (``SumGrowth`` in
engine/ops/lowp_emu.hpp; docs/error-model.md, "Correlated rounding" and "Repeated terms"), in units
of ``u_fp32 * sum|t|`` per line:

- sqrt(n) while successive roundings are independent;
- more over near-equal terms: past k* = spread / (32 u mean|t|), a running sum's roundings add up
  one-signed: sqrt(n) + (n^2 - k*^2) / (2n);
- more over repeated terms: every copy of one value added within a binade errs the same way, so
  the growth is sqrt(sum over the distinct values of count^2);
- plus the terms within an ulp or two of the sum (|t| <= 2u sum|t|), each of which may be dropped
  or rounded by up to min(|t|, u sum|t|) whatever the order: ``absorbed``.
"""

from __future__ import annotations

import torch

U32 = 2.0 ** -24


def _lines(t: torch.Tensor, dims) -> torch.Tensor:
    """``t`` with the reduced ``dims`` flattened into its last dim (the other dims kept, in order)."""
    keep = [d for d in range(t.dim()) if d not in dims]
    return t.permute(*keep, *dims).reshape(*[t.shape[d] for d in keep], -1)


def repeat_growth(lines: torch.Tensor) -> torch.Tensor:
    """sqrt(sum over the distinct finite values of each line of count^2), lines along the last dim."""
    n = lines.shape[-1]
    if n == 0:
        return torch.zeros(lines.shape[:-1], dtype=torch.float64)
    x = torch.where(lines == 0, torch.zeros_like(lines), lines)  # -0 and +0: one value
    finite = torch.isfinite(x)
    s, _ = torch.sort(torch.where(finite, x, torch.full_like(x, float("inf"))), dim=-1)
    fin = torch.isfinite(s)
    # a run starts where the sorted value differs from the one before it
    start = torch.ones_like(s, dtype=torch.bool)
    start[..., 1:] = s[..., 1:] != s[..., :-1]
    run = torch.cumsum(start.to(torch.int64), dim=-1) - 1  # the run of each element
    counts = torch.zeros(s.shape, dtype=torch.float64)
    counts.scatter_add_(-1, run, fin.to(torch.float64))
    return torch.sqrt((counts * counts).sum(-1))


def near_equal_growth(n: float, mean_abs: torch.Tensor, spread: torch.Tensor) -> torch.Tensor:
    """sqrt(n), or sqrt(n) + (n^2 - k*^2)/(2n) where k* = spread / (32 u mean|t|) < n."""
    root = torch.full_like(mean_abs, n ** 0.5)
    if n <= 1:
        return root
    ok = (mean_abs > 0) & torch.isfinite(mean_abs) & torch.isfinite(spread)
    k_star = spread / (32.0 * U32 * torch.where(ok, mean_abs, torch.ones_like(mean_abs)))
    extra = (n * n - k_star * k_star) / (2.0 * n)
    return torch.where(ok & (k_star < n), root + extra, root)


def absorbed(terms_abs: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """Sum over a line of min(|t|, u S) for |t| <= 2u S (S = sum|t|), in units of u S."""
    half = (U32 * total).unsqueeze(-1)
    small = terms_abs <= 2.0 * half
    a = torch.where(small, torch.minimum(terms_abs, half), torch.zeros_like(terms_abs)).sum(-1)
    safe = torch.where(total > 0, U32 * total, torch.ones_like(total))
    return torch.where((total > 0) & torch.isfinite(total), a / safe, torch.zeros_like(total))


def sum_growth(terms: torch.Tensor, dims) -> torch.Tensor:
    """The growth of an fp32 sum of ``terms`` over ``dims`` (a list of dims), per line: the max of
    the near-equal and the repeated terms' growth, plus the absorbed terms. Shaped like the sum
    without its reduced dims."""
    lines = _lines(terms, list(dims))
    n = lines.shape[-1]
    a = lines.abs()
    finite_a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    total = finite_a.sum(-1)
    if n == 0:
        return torch.zeros_like(total)
    lo = torch.where(torch.isfinite(a), a, torch.full_like(a, float("inf"))).amin(-1)
    hi = finite_a.amax(-1)
    g = near_equal_growth(float(n), total / n, hi - lo)
    if n > 1:
        g = torch.maximum(g, repeat_growth(lines))
    return g + absorbed(finite_a, total)
