#!/usr/bin/env python3
"""Probes for the CUDA sweep's failures after 6acc208 (evidence/gpu/README.md lists the pages of each class):
minimal inputs that show, on the GPU, what each captured failure pointed at.

    python3 evidence/gpu/probe_cuda_rerun2.py        # on the GPU machine (torch 2.x, CUDA)

1. torch._scaled_mm (cuBLASLt FP8 GEMM): how many bits of a small product survive being added to a
   large one, for K = 32 ... 1024 and use_fast_accum off (PyTorch's default) and on.
2. TF32 GEMMs: an fp32 input above TF32's largest finite value becomes Inf once rounded to TF32.
3. SDPA math backend, causal: a masked score that overflows fp32 meets the additive -Inf mask.
4. cuDNN grouped conv2d fp16: an Inf input in one group's channels, read by another group's outputs.
5. cuDNN conv1d fp16: a convolution that overflows fp16 negatively comes out as 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

CUDA = "cuda"
E4M3 = torch.float8_e4m3fn


def fp8_accumulation() -> None:
    print("1. torch._scaled_mm, a row [big, s, s, ..., s] (K entries) times ones, out fp32, scales 1:")
    one = torch.ones((), device=CUDA)
    for big in (256.0, 448.0):
        for K in (32, 64, 128, 1024):
            cells = []
            for s_exp in range(-1, -10, -1):
                s = 2.0 ** s_exp
                a = torch.full((16, K), s, device=CUDA)
                a[:, 0] = big
                a8 = a.to(E4M3)
                b8 = torch.ones((16, K), device=CUDA).to(E4M3).t()  # column-major K x N
                exact = big + (K - 1) * s
                got = {}
                for fast in (False, True):
                    y = torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.float32,
                                         use_fast_accum=fast)
                    got[fast] = y[0, 0].item()
                comp = (a8.float() @ b8.float())[0, 0].item()
                cells.append(f"s=2^{s_exp}: {got[False]:.9g}/{got[True]:.9g} (exact {exact:.9g}, fp32 {comp:.9g})")
            print(f"  big {big:g}, K {K}: " + "; ".join(cells))
    print("  (each cell: use_fast_accum off / on)")
    a = torch.randn(32, 64, device=CUDA).to(E4M3)
    buf = torch.empty(32 * 64 + 1, device=CUDA).to(E4M3)
    buf[1:] = a.flatten()
    shifted = buf[1:].view(32, 64)
    b = torch.randn(16, 64, device=CUDA).to(E4M3).t()
    try:
        torch._scaled_mm(shifted, b, scale_a=one, scale_b=one, out_dtype=torch.float32)
        print("  a at a storage offset of one element: ok")
    except Exception as e:  # noqa: BLE001
        print(f"  a at a storage offset of one element: {type(e).__name__}: {str(e).splitlines()[0][:160]}")


def tf32_overflow() -> None:
    print("2. TF32: [3.4025e38, -3.4025e38] @ [1, 1] (exact 0; both inputs finite in fp32)")
    a = torch.tensor([[3.4025e38, -3.4025e38]], device=CUDA)
    b = torch.ones(2, 1, device=CUDA)
    tf32_max = (2 - 2 ** -10) * 2.0 ** 127
    for on in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = on
        y = (a @ b).item()
        lin = F.linear(a, b.t()).item()
        print(f"  allow_tf32={on}: a @ b = {y}, F.linear = {lin}  (TF32's largest finite value {tf32_max:.6g})")
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(95, 7, generator=g).to(CUDA)
    b = torch.randn(7, 61, generator=g).to(CUDA)
    a[0, 0], a[0, 1], b[0], b[1] = 3.4025e38, -3.4025e38, 1.0, 1.0  # row 0: the two cancel exactly
    for on in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = on
        y = a @ b
        print(f"  95x7 @ 7x61 (the captured case's shape), allow_tf32={on}: row 0 has "
              f"{int(torch.isnan(y[0]).sum())} NaN and {int(torch.isinf(y[0]).sum())} Inf of 61 (exact row 0: finite)")
    torch.backends.cuda.matmul.allow_tf32 = False


def sdpa_additive_mask() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    print("3. SDPA causal, Lq = Lk = 2, D = 1, scale 1: q = [2e19, 1], k = [1, 2e19], v = [1, 2]")
    q = torch.tensor([2e19, 1.0], device=CUDA).view(1, 1, 2, 1)
    k = torch.tensor([1.0, 2e19], device=CUDA).view(1, 1, 2, 1)
    v = torch.tensor([1.0, 2.0], device=CUDA).view(1, 1, 2, 1)
    s = q @ k.transpose(-1, -2)
    print(f"  raw scores row 0: {s[0, 0, 0].tolist()} (position 1 is masked; exact output row 0: v[0] = 1)")
    with sdpa_kernel([SDPBackend.MATH]):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    masked = s.masked_fill(torch.ones(2, 2, dtype=torch.bool, device=CUDA).triu(1), float("-inf"))
    comp = torch.softmax(masked, -1) @ v
    print(f"  math backend: {y.flatten().tolist()}; softmax(masked_fill(-inf)) @ v: {comp.flatten().tolist()}")


def grouped_conv_inf() -> None:
    print("4. conv2d fp16, groups 4 (16 -> 8 channels, 2x5 kernel, stride 2, padding (0, 3)), finite except "
          "one Inf in channel 12 (group 3):")
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(3, 16, 31, 64, generator=g).half().to(CUDA)
    w = torch.randn(8, 4, 2, 5, generator=g).half().to(CUDA)
    bias = torch.zeros(8, dtype=torch.float16, device=CUDA)
    x[0, 12, 10, 20] = float("inf")
    layouts = {"contiguous": x, "channels_last": x.contiguous(memory_format=torch.channels_last),
               "transposed (as captured)": x.transpose(2, 3).contiguous().transpose(2, 3)}
    for layout, xx in layouts.items():
        y = F.conv2d(xx, w, bias, stride=2, padding=(0, 3), groups=4)
        nan_by_group = [int(torch.isnan(y[:, 2 * gi:2 * gi + 2]).sum()) for gi in range(4)]
        cpu = F.conv2d(x.float().cpu(), w.float().cpu(), None, stride=2, padding=(0, 3), groups=4)
        print(f"  {layout}: NaN outputs per group {nan_by_group} (only group 3 reads channel 12; fp32 on the CPU: "
              f"{[int(torch.isnan(cpu[:, 2 * gi:2 * gi + 2]).sum()) for gi in range(4)]})")


def conv1d_negative_overflow() -> None:
    print("5. conv1d fp16 (x transposed, weight strided, Cin 3, 5 taps, dilation 3): every input 256, weights "
          "+-256 (exact outputs +-983040, past fp16's 65504)")
    x = torch.full((8, 95, 3), 256.0, dtype=torch.float16, device=CUDA).transpose(1, 2)
    w = torch.full((64, 3, 15), 256.0, dtype=torch.float16, device=CUDA)[:, :, ::3]
    w[32:] = -256.0
    for bias in (None, torch.full((64,), 0.5, dtype=torch.float16, device=CUDA)):
        y = F.conv1d(x, w, bias, dilation=3)
        print(f"  bias {'none' if bias is None else '0.5'}: positive outputs {y[0, 0, :3].tolist()}, "
              f"negative outputs {y[0, 40, :3].tolist()}")
    torch.backends.cudnn.enabled = False
    y = F.conv1d(x, w, None, dilation=3)
    torch.backends.cudnn.enabled = True
    print(f"  cuDNN off: positive {y[0, 0, :3].tolist()}, negative {y[0, 40, :3].tolist()}")


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for probe in (fp8_accumulation, tf32_overflow, sdpa_additive_mask, grouped_conv_inf, conv1d_negative_overflow):
        try:
            probe()
        except Exception as e:  # noqa: BLE001 - one probe's failure is reported, the rest still run
            print(f"  {probe.__name__} raised {type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    main()
