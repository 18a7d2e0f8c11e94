"""Mutable controls of the GEMMs and convolutions: matmul, bmm, linear, conv1d, conv2d (im2col),
scaled_fp8_matmul.

Each is a K loop over 32-wide tiles (accumulate.k_loop): the tile product in fp32 (the MMA), then
``acc += tile`` rounded at ``accumulator`` (an accumulator kept in fewer bits across K tiles), the
epilogue (bias, scales) in the accumulator. ``operands`` rounds a and b before the products, as
TF32 tensor cores do to fp32 operands (exact for fp16/bf16 operands until k passes their
mantissa: 2^13 for fp16, 2^16 for bf16).
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.nn.functional as F

from bench.power.accumulate import k_loop
from bench.power.kernel import Args, MutableKernel, Outputs, case_dtype, f32, optional_f32
from bench.power.rounding import Mutation

GEMM_SITES = {"accumulator": "acc += A_tile @ B_tile after each 32-wide K tile (and the epilogue's bias/scale)",
              "operands": "a and b before the products (TF32-like operand precision)"}


def _matmul(args: Args, mut: Mutation) -> Outputs:
    return [(k_loop(f32(args["a"]), f32(args["b"]), mut, "accumulator", "operands"), case_dtype(args, "a"))]


def _linear(args: Args, mut: Mutation) -> Outputs:
    acc = k_loop(f32(args["x"]), f32(args["weight"]).transpose(0, 1), mut, "accumulator", "operands")
    bias = optional_f32(args["bias"])
    if bias is not None:
        acc = mut(acc + bias, "accumulator")
    return [(acc, case_dtype(args, "x"))]


def _conv(args: Args, mut: Mutation, spatial: int) -> Outputs:
    """im2col: the unfolded input [B, G, Kg, L] against the weight [G, Cout/G, Kg], K = Cin/G * kernel."""
    x, w = f32(args["x"]), f32(args["weight"])
    g = int(args["groups"])
    stride, padding, dilation = (list(args[n]) * (spatial if len(args[n]) == 1 else 1)
                                 for n in ("stride", "padding", "dilation"))
    if spatial == 1:  # as a 2-D convolution of height 1
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
    b, cout = x.shape[0], w.shape[0]
    kh, kw = w.shape[-2], w.shape[-1]
    cols = F.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride)  # [B, Cin*kh*kw, L]
    hout = (x.shape[2] + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wout = (x.shape[3] + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = cols.reshape(b, g, -1, cols.shape[-1])
    wg = w.reshape(g, cout // g, -1)
    acc = k_loop(wg, cols, mut, "accumulator", "operands")  # [k, B, G, Cout/G, L]
    acc = acc.reshape(acc.shape[:2] + (cout, hout, wout))
    bias: Optional[torch.Tensor] = optional_f32(args["bias"])
    if bias is not None:
        acc = mut(acc + bias[:, None, None], "accumulator")
    if spatial == 1:
        acc = acc[:, :, :, 0, :]
    return [(acc, case_dtype(args, "x"))]


def _scaled_fp8_matmul(args: Args, mut: Mutation) -> Outputs:
    acc = k_loop(f32(args["a"]), f32(args["b"]), mut, "accumulator", "operands")
    scale = f32(args["scale_a"]) * f32(args["scale_b"])
    return [(mut(acc * scale, "accumulator"), args["out_dtype"])]


def _gemm_work(a: torch.Tensor, b: torch.Tensor) -> int:
    """One k slice: the mutated operands and the accumulator [.., M, N]."""
    return max(a.numel(), b.numel(), a.numel() // max(a.shape[-1], 1) * b.shape[-1])


def _conv_work(args: Args) -> int:
    """One k slice: the im2col columns (the mutated operand) and the output."""
    x, w = args["x"], args["weight"]
    kernel = int(torch.tensor(w.shape[2:]).prod())
    return max(x.numel() * kernel, x.shape[0] * w.shape[0] * int(torch.tensor(x.shape[2:]).prod()))


KERNELS: Dict[str, MutableKernel] = {k.op: k for k in (
    MutableKernel("matmul", "K loop over 32-wide tiles, fp32 tile products and accumulator", GEMM_SITES, _matmul,
                  work=lambda a: _gemm_work(a["a"], a["b"])),
    MutableKernel("bmm", "K loop over 32-wide tiles, fp32 tile products and accumulator", GEMM_SITES, _matmul,
                  work=lambda a: _gemm_work(a["a"], a["b"])),
    MutableKernel("linear", "x @ W^T as a K loop over 32-wide tiles, bias added to the fp32 accumulator",
                  GEMM_SITES, _linear, work=lambda a: _gemm_work(a["x"], a["weight"].transpose(0, 1))),
    MutableKernel("conv1d", "im2col and a K loop over 32-wide tiles of Cin/groups * Kl, fp32 accumulator",
                  GEMM_SITES, lambda a, m: _conv(a, m, 1), work=_conv_work),
    MutableKernel("conv2d", "im2col and a K loop over 32-wide tiles of Cin/groups * Kh * Kw, fp32 accumulator",
                  GEMM_SITES, lambda a, m: _conv(a, m, 2), work=_conv_work),
    MutableKernel("scaled_fp8_matmul", "K loop over 32-wide tiles of the e4m3 values, fp32 accumulator, "
                  "times scale_a * scale_b", GEMM_SITES, _scaled_fp8_matmul,
                  work=lambda a: _gemm_work(a["a"], a["b"])),
)}
