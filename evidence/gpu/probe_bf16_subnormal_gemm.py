#!/usr/bin/env python3
"""Probe: do cuBLAS's bf16 (and fp16) tensor-core GEMMs flush subnormal operands, or align the products
to an exponent that a subnormal operand's exponent field overstates? (evidence/gpu/tf32.md, "Tensor-core subnormal alignment": one
bf16 bmm element summed (-2^-133)(-3.3895e38) + (-3.3895e38)(2^-133), which cancel exactly, and
p*q = -9.4046e-7, and came out as -15 * 2^-24.)

    python3 evidence/gpu/probe_bf16_subnormal_gemm.py      # on the GPU machine (torch 2.x, CUDA)

Every GEMM holds zeros except one output's dot product: a row [s, L, p] against a column [L, -s, q]
(in the low dtype), so that s*L - L*s = 0 exactly and the output is exactly p*q, at two shapes: a
256 x 64 @ 64 x 256 matmul and the failing case's bmm (32 x 1027 x 7 @ 7 x 128, b expanded). Pairs (s,
L): a subnormal s against a large L, and normal pairs with the same products. If subnormals were
flushed, s*L would vanish and p*q come out right (and a lone s*L would be 0). If the products are
aligned to the largest operand exponent fields with a subnormal's field read as the smallest normal's,
the subnormal pair's alignment exponent is 2^7 (bf16) too large and p*q loses 7 more bits than with
the normal pair of the same products.
"""

from __future__ import annotations

import torch

CUDA = "cuda"


def one(dtype: torch.dtype, row, col, shape: str):
    """(the output element, the kernels) for a GEMM of zeros but for a's row and b's column."""
    if shape == "mm":
        a = torch.zeros(256, 64, dtype=dtype)
        b = torch.zeros(64, 256, dtype=dtype)
        a[7, :len(row)] = torch.tensor(row, dtype=torch.float64).to(dtype)
        b[:len(col), 9] = torch.tensor(col, dtype=torch.float64).to(dtype)
        a, b = a.to(CUDA), b.to(CUDA)
        run = lambda: a @ b  # noqa: E731
        pick = (7, 9)
    else:  # the failing case's shape: bmm, B 32, M 1027, K 7, N 128, b expanded over the batch
        a = torch.zeros(32, 1027, 7, dtype=dtype)
        b = torch.zeros(1, 7, 128, dtype=dtype)
        a[3, 244, :len(row)] = torch.tensor(row, dtype=torch.float64).to(dtype)
        b[0, :len(col), 16] = torch.tensor(col, dtype=torch.float64).to(dtype)
        a, b = a.to(CUDA), b.to(CUDA).expand(32, 7, 128)
        run = lambda: torch.bmm(a, b)  # noqa: E731
        pick = (3, 244, 16)
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            y = run()
            torch.cuda.synchronize()
        kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    except (AssertionError, RuntimeError):  # no CUDA profiler (a dry run on the CPU)
        y, kernels = run(), []
    got = y[pick].item()
    exact = sum(float(torch.tensor(r, dtype=torch.float64).to(dtype).double()) *
                float(torch.tensor(c, dtype=torch.float64).to(dtype).double()) for r, c in zip(row, col))
    fp32 = (a.float() @ b.float())[pick].item()
    return got, exact, fp32, kernels


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        try:
            setattr(torch.backends.cuda.matmul, flag, False)
        except (AttributeError, AssertionError):  # an older torch without the flag
            pass
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    BF, H = torch.bfloat16, torch.float16
    p, q = -0.000408172607421875, 0.0023040771484375  # the failing element's small product (bf16 values)
    L = 3.3895313892515355e38  # bf16's largest finite value
    cases = {
        BF: [
            ("lone subnormal product: [2^-133] . [2^127]", [2.0 ** -133], [2.0 ** 127]),
            ("lone subnormal product: [2^-130] . [2^127]", [2.0 ** -130], [2.0 ** 127]),
            ("lone subnormal product: [3 * 2^-129] . [2^127]", [3 * 2.0 ** -129], [2.0 ** 127]),
            ("the failing element: [-2^-133, -L, p] . [-L, 2^-133, q]", [-(2.0 ** -133), -L, p], [-L, 2.0 ** -133, q]),
            ("subnormal pair: [2^-133, 2^127, p] . [2^127, -2^-133, q] (products +-2^-6)",
             [2.0 ** -133, 2.0 ** 127, p], [2.0 ** 127, -(2.0 ** -133), q]),
            ("normal pair, same products: [2^-6, 1, p] . [1, -2^-6, q]", [2.0 ** -6, 1.0, p], [1.0, -(2.0 ** -6), q]),
            ("normal pair, smallest normal: [2^-126, 2^120, p] . [2^120, -2^-126, q] (products +-2^-6)",
             [2.0 ** -126, 2.0 ** 120, p], [2.0 ** 120, -(2.0 ** -126), q]),
            ("normal pair at the subnormal's field: [2^-126, 2^127, p] . [2^127, -2^-126, q] (products +-2)",
             [2.0 ** -126, 2.0 ** 127, p], [2.0 ** 127, -(2.0 ** -126), q]),
            ("normal pair, products +-2: [2, 1, p] . [1, -2, q]", [2.0, 1.0, p], [1.0, -2.0, q]),
        ],
        H: [
            ("lone subnormal product: [2^-24] . [2^15]", [2.0 ** -24], [2.0 ** 15]),
            ("subnormal pair: [2^-24, 2^15, p] . [2^15, -2^-24, q] (products +-2^-9)",
             [2.0 ** -24, 2.0 ** 15, p], [2.0 ** 15, -(2.0 ** -24), q]),
            ("normal pair, same products: [2^-9, 1, p] . [1, -2^-9, q]", [2.0 ** -9, 1.0, p], [1.0, -(2.0 ** -9), q]),
            ("normal pair at the subnormal's field: [2^-14, 2^15, p] . [2^15, -2^-14, q] (products +-2)",
             [2.0 ** -14, 2.0 ** 15, p], [2.0 ** 15, -(2.0 ** -14), q]),
        ],
    }
    for dtype, rows in cases.items():
        for shape in ("mm", "bmm"):
            print(f"{dtype} {'256x64 @ 64x256' if shape == 'mm' else 'bmm 32x1027x7 @ 7x128 (b expanded)'}:")
            kernels_seen = set()
            for name, row, col in rows:
                try:
                    got, exact, fp32, kernels = one(dtype, row, col, shape)
                except Exception as e:  # noqa: BLE001
                    print(f"  {name}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                kernels_seen.update(kernels)
                held = torch.tensor(exact).to(dtype).item()
                print(f"  {name}: GPU {got:.9g} = {got / 2.0 ** -24:.6g} * 2^-24; exact {exact:.9g} (in {dtype}: "
                      f"{held:.9g}); fp32 GEMM of the same values {fp32:.9g}")
            print(f"  kernels: {sorted(kernels_seen)}")


if __name__ == "__main__":
    main()
