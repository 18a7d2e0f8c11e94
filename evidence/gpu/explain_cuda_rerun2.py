#!/usr/bin/env python3
"""Reproduce captured CUDA outputs with compositions of what the kernels do (evidence/gpu/imprecise.md,
cudnn.md, tf32.md and holes.md), on any machine: no GPU, torch 1.13 is enough.

    PYTHONPATH=. python3 evidence/gpu/explain_cuda_rerun2.py DIR [DIR ...]   # folders written by capture_cuda.py

For each captured case of a class explained there, it rebuilds the inputs from the pickle's snapshot,
computes the candidate formulation in fp64/numpy and compares it with the stored CUDA output: the
share of elements equal bit for bit, or whether the NaN and Inf positions are the same.

- logsumexp fp16: max, x - max, exp, the sum (fp32 accumulation), log, each stored in fp16
- TF32 GEMMs: the inputs rounded to TF32 (10 fraction bits, to nearest; overflow to Inf)
- SDPA math backend: q*sqrt(s) @ (k*sqrt(s))^T + a 0/-Inf causal mask (added, not filled)
- cuDNN grouped conv1d/conv2d (and TF32 convolutions): the groups of a tile of output channels as one dense GEMM (zero weights
  outside each group), the zero padding multiplied like any input, the bias added to the stored result
- cuDNN conv1d fp16 boundary: the convolution stored in fp16 with -Inf turned into 0, then + bias
- cumsum fp16: PyTorch's chunked Sklansky scan, every addition rounded to fp16
- torch._scaled_mm: chunks of 32 products aligned to the largest exponent, cut to 13 fraction bits
"""

from __future__ import annotations

import itertools
import math
import pickle
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np
import torch

from bench.conformance.rejudge import load
from gpuemu import _frameworks as fw


def inputs(rec: Dict[str, Any]) -> Dict[str, Any]:
    args = {k: fw.make_input("torch", dt, shape, strides, off, np.frombuffer(bytearray(st), np.uint8), None).tensor
            for k, (dt, shape, strides, off, st) in rec["snapshot"].items()}
    args.update(rec["attrs"])
    return args


def cuda_out(rec: Dict[str, Any]) -> np.ndarray:
    arr, _ = rec["cuda_out"][0]
    if arr.dtype == np.uint16:  # bfloat16, as gpuemu stores it
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return np.asarray(arr, dtype=np.float64) if arr.dtype != np.float16 else arr.astype(np.float32)


def same(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if not a.size:
        return float("nan")
    with np.errstate(invalid="ignore"):
        return float(((a == b) | (np.isnan(a) & np.isnan(b))).mean())


def nonfinite_same(a: np.ndarray, b: np.ndarray) -> Tuple[bool, int, int]:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    inf = np.isinf(a) & np.isinf(b)
    ok = bool((np.isnan(a) == np.isnan(b)).all() and (np.isinf(a) == np.isinf(b)).all() and (a[inf] == b[inf]).all())
    return ok, int(np.isnan(b).sum()), int(np.isinf(b).sum())


def to_bf16(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).bfloat16().float().numpy()


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "float16":
            return np.asarray(x).astype(np.float16).astype(np.float32)
        if dtype == "bfloat16":
            return to_bf16(np.asarray(x, np.float32))
        return np.asarray(x).astype(np.float32)


def tf32(x: torch.Tensor) -> np.ndarray:
    """fp32 -> TF32, to nearest (ties to even): 13 low bits cleared; above TF32's range, Inf."""
    i = x.float().contiguous().numpy().view(np.uint32).astype(np.uint64)
    lsb = (i >> np.uint64(13)) & np.uint64(1)
    i = ((i + np.uint64(0xFFF) + lsb) & ~np.uint64(0x1FFF)) & np.uint64(0xFFFFFFFF)
    return i.astype(np.uint32).view(np.float32).reshape(tuple(x.shape)).astype(np.float64)


def conv(x: np.ndarray, w: np.ndarray, stride, padding, dilation) -> np.ndarray:
    """Dense fp64 convolution by explicit products over the zero-padded input (0 * Inf = NaN)."""
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    ks = w.shape[2:]
    outs = [(xp.shape[2 + d] - dilation[d] * (ks[d] - 1) - 1) // stride[d] + 1 for d in range(nd)]
    y = np.zeros((x.shape[0], w.shape[0]) + tuple(outs))
    with np.errstate(invalid="ignore", over="ignore"):
        for tap in itertools.product(*[range(k) for k in ks]):
            sl = tuple(slice(tap[d] * dilation[d], tap[d] * dilation[d] + stride[d] * (outs[d] - 1) + 1, stride[d])
                       for d in range(nd))
            y += np.einsum("nc...,oc->no...", xp[(slice(None), slice(None)) + sl], w[(slice(None), slice(None)) + tap])
    return y


def grouped_tiles(x: np.ndarray, w: np.ndarray, a: Dict[str, Any], tile: int) -> np.ndarray:
    """The output channels in tiles of `tile`; each tile a dense GEMM over its groups' input channels,
    the weight zero outside each output channel's own group."""
    c, o, g = x.shape[1], w.shape[0], a["groups"]
    og, cg = o // g, c // g
    dense = np.zeros((o, c) + w.shape[2:])
    for k in range(g):
        dense[k * og:(k + 1) * og, k * cg:(k + 1) * cg] = w[k * og:(k + 1) * og]
    parts = []
    for o0 in range(0, o, tile):
        o1 = min(o, o0 + tile)
        c0, c1 = (o0 // og) * cg, ((o1 - 1) // og + 1) * cg
        parts.append(conv(x[:, c0:c1], dense[o0:o1, c0:c1], a["stride"], a["padding"], a["dilation"]))
    return np.concatenate(parts, 1)


def sklansky(xs: np.ndarray, nx: int) -> np.ndarray:
    """PyTorch's tensor_kernel_scan_innermost_dim over the last axis in fp16 (chunks of 2*nx)."""
    def add(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return (p.astype(np.float32) + q.astype(np.float32)).astype(np.float16)

    out = np.zeros(xs.shape, np.float32)
    total = np.zeros(xs.shape[:-1], np.float16)
    for c0 in range(0, xs.shape[-1], 2 * nx):
        n = min(2 * nx, xs.shape[-1] - c0)
        buf = np.zeros(xs.shape[:-1] + (2 * nx,), np.float16)
        buf[..., :n] = xs[..., c0:c0 + n]
        buf[..., 0] = add(buf[..., 0], total)
        s = 1
        while s <= nx:
            for t in range(nx):
                base = (t // s) * (2 * s) + s
                buf[..., base + t % s] = add(buf[..., base + t % s], buf[..., base - 1])
            s <<= 1
        out[..., c0:c0 + n] = buf[..., :n]
        total = buf[..., 2 * nx - 1]
    return out


def fp8_tensor_core(a: np.ndarray, b: np.ndarray, chunk: int = 32, bits: int = 13) -> np.ndarray:
    prods = a[:, :, None] * b[None, :, :]
    acc = np.zeros((a.shape[0], b.shape[1]))
    for c0 in range(0, a.shape[1], chunk):
        terms = np.concatenate([acc[:, None, :], prods[:, c0:c0 + chunk, :]], axis=1)
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.abs(terms).max(axis=1)))
        q = np.exp2(np.where(np.isfinite(e), e, 0) - bits)[:, None, :]
        acc = (np.trunc(terms / q) * q).sum(axis=1).astype(np.float32).astype(np.float64)
    return acc


def explain(path: Path) -> str:
    rec = load(path)
    row = rec["row"]
    op, dtype, impl = row["op"], row["dtype"], row["impl"]
    if "cuda_out" not in rec:
        return f"{rec.get('error', '?')[:100]}"
    a = inputs(rec)
    y = cuda_out(rec)
    if op == "logsumexp":
        x = a["x"].double().numpy()
        dim = a.get("dim", -1)
        m = round_to(x.max(dim, keepdims=True), dtype)
        m = np.where(np.isinf(m), 0.0, m)
        e = round_to(np.exp(round_to(x - m, dtype)), dtype)
        s = round_to(e.sum(dim, keepdims=True).astype(np.float32), dtype)
        with np.errstate(divide="ignore"):
            out = round_to(round_to(np.log(s), dtype) + m, dtype)
        if not a.get("keepdim"):
            out = out.squeeze(dim)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            once = round_to(np.log(np.exp(x - x.max(dim, keepdims=True)).sum(dim, keepdims=True))
                            + x.max(dim, keepdims=True), dtype)
        if not a.get("keepdim"):
            once = once.squeeze(dim)
        return f"each step stored in {dtype}: {same(out, y):.2%} bit for bit (fp64 rounded once: {same(once, y):.2%})"
    if "TF32" in impl and op in ("matmul", "bmm", "linear"):
        k1, k2 = ("x", "weight") if op == "linear" else ("a", "b")
        lhs, rhs = tf32(a[k1]), tf32(a[k2])
        with np.errstate(invalid="ignore", over="ignore"):
            e = lhs @ (rhs.swapaxes(-1, -2) if op == "linear" else rhs)
            if op == "linear" and a.get("bias") is not None:
                e = e + a["bias"].double().numpy()
        ok, nans, infs = nonfinite_same(round_to(e, "float32"), y)
        return f"inputs rounded to TF32 (overflow to Inf): NaN and Inf positions {'the same' if ok else 'DIFFER'} ({nans} NaN, {infs} Inf)"
    if op == "flash_attention" and "math" in impl:
        q, k, v = (a[n].float() for n in ("q", "k", "v"))
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
        sf = math.sqrt(a["scale"] if a.get("scale") is not None else 1 / math.sqrt(q.shape[-1]))
        s = (q * sf) @ (k * sf).transpose(-1, -2)
        if a.get("causal"):
            lq, lk = s.shape[-2:]
            s = s + torch.zeros(lq, lk).masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1), float("-inf"))
        p = torch.softmax(s, -1).masked_fill(torch.isneginf(s).all(-1, keepdim=True), 0.0)
        out = round_to((p @ v).numpy(), dtype)
        ok, nans, infs = nonfinite_same(out, y)
        return (f"q*sqrt(s) @ (k*sqrt(s))^T + 0/-Inf mask: NaN and Inf positions {'the same' if ok else 'DIFFER'} "
                f"({nans} NaN, {infs} Inf), {same(out, y):.4%} of all elements bit for bit")
    if op == "conv1d" and row["strategy"] == "boundary" and dtype == "float16":
        c = conv(a["x"].double().numpy(), a["weight"].double().numpy(), a["stride"], a["padding"], a["dilation"])
        stored = round_to(c.astype(np.float32), dtype)
        bias = a["bias"].float().numpy().reshape(1, -1, 1) if a.get("bias") is not None else 0.0
        neg = c.astype(np.float32) <= -65520
        pos = c.astype(np.float32) >= 65520
        stored0 = np.where(np.isneginf(stored), 0.0, stored)
        out = round_to(stored0 + bias, dtype)
        plain = round_to(stored + bias, dtype)
        b = np.broadcast_to(round_to(np.asarray(bias, np.float32), dtype), y.shape)
        return (f"negative overflows {int(neg.sum())}, of which CUDA gives the bias alone {int((y[neg] == b[neg]).sum())}; "
                f"positive overflows {int(pos.sum())}, CUDA +Inf {int((y[pos] == np.inf).sum())}; conv stored with -Inf -> 0, "
                f"then + bias: {same(out, y):.2%} bit for bit (stored as is: {same(plain, y):.2%})")
    if op in ("conv1d", "conv2d") and row["strategy"] in ("special", "boundary") and (
            "TF32" in impl or a.get("groups", 1) > 1):
        tf = "TF32" in impl
        xx = tf32(a["x"]) if tf else a["x"].double().numpy()
        ww = tf32(a["weight"]) if tf else a["weight"].double().numpy()
        res = []
        for tile in (4, 8, 16):
            c = round_to(grouped_tiles(xx, ww, a, tile), dtype)
            shape = (1, -1) + (1,) * (c.ndim - 2)
            out = round_to(c + a["bias"].float().numpy().reshape(shape), dtype) if a.get("bias") is not None else c
            ok, nans, infs = nonfinite_same(out, y)
            fin = np.isfinite(out) & np.isfinite(y)
            res.append(f"tiles of {tile}: {'same' if ok else 'differ'} ({same(out[fin], y[fin]):.2%} of the finite bit for bit)")
        what = "inputs rounded to TF32, " if tf else ""
        return (f"{what}groups as dense GEMMs over tiles of output channels, NaN/Inf positions: {'; '.join(res)} "
                f"(CUDA {int(np.isnan(y).sum())} NaN)")
    if op == "group_norm" and row["strategy"] == "special" and dtype == "float32" or (
            op == "group_norm" and row["style"] == "upcast" and row["strategy"] == "special"):
        x = a["x"].double().numpy()
        n, c = x.shape[:2]
        g = a["num_groups"]
        xg = x.reshape(n, g, -1)
        shape = (1, c) + (1,) * (x.ndim - 2)
        w, b = a["weight"].double().numpy().reshape(shape), a["bias"].double().numpy().reshape(shape)
        with np.errstate(invalid="ignore", over="ignore"):
            mu = xg.mean(-1, keepdims=True)
            rstd = 1 / np.sqrt(((xg - mu) ** 2).mean(-1, keepdims=True) + a["eps"])
            mu_c = np.repeat(mu, c // g, axis=1).reshape((n, c) + (1,) * (x.ndim - 2))
            rstd_c = np.repeat(rstd, c // g, axis=1).reshape((n, c) + (1,) * (x.ndim - 2))
            direct = round_to((x - mu_c) * rstd_c * w + b, dtype)
            scale = rstd_c * w
            folded = round_to(x * scale + (b - scale * mu_c), dtype)
        ok_d, nans, infs = nonfinite_same(direct, y)
        ok_f = nonfinite_same(folded, y)[0]
        return (f"(x - mean) * rstd * w + b: NaN and Inf positions {'the same' if ok_d else 'DIFFER'} ({nans} NaN, "
                f"{infs} Inf); folded x * (rstd * w) + (b - rstd * w * mean): {'the same' if ok_f else 'differ'} "
                f"({int(np.isnan(folded).sum())} NaN, {int(np.isinf(folded).sum())} Inf)")
    if op == "cumsum" and dtype == "float16":
        dim = a.get("dim", -1)
        xs = np.moveaxis(a["x"].float().numpy(), dim, -1).astype(np.float16)
        ys = np.moveaxis(y, dim, -1)
        return "; ".join(f"Sklansky chunks of {2 * nx}: {same(sklansky(xs, nx), ys):.2%}" for nx in (16, 32))
    if op == "scaled_fp8_matmul":
        lhs, rhs = a["a"].double().numpy(), a["b"].double().numpy()
        alpha = np.float32(a["scale_a"].item()) * np.float32(a["scale_b"].item())
        od = a["out_dtype"]
        tc = round_to(fp8_tensor_core(lhs, rhs).astype(np.float32) * alpha, od)
        f32 = round_to((lhs @ rhs).astype(np.float32) * alpha, od)
        return f"13-bit tensor-core accumulation: {same(tc, y):.2%} bit for bit (fp32 accumulation: {same(f32, y):.2%})"
    return "no formulation here"


def main() -> int:
    files = sorted({p for d in sys.argv[1:] for p in Path(d).glob("*.pkl")}, key=lambda p: p.name)
    for path in files:
        print(f"{path.name}: {explain(path)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
