"""Mutable controls of attention: flash_attention (FlashAttention-2) and decode_attention.

Per 64-key block: S = Q K^T * scale in fp32 (``scores``: the score GEMM's result), the running max
m (exact: a rounded m used consistently cancels), P = exp(S - m_new) rounded to the input dtype
before P V (what FA-2 does, part of the control), the online statistics l = l * alpha + rowsum(P)
(``running_sum``) and acc = acc * alpha + P V (``accumulator``), and out = acc / l at the end.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import torch

from bench.power.kernel import Args, MutableKernel, Outputs, case_dtype, f32
from bench.power.rounding import Mutation

BLOCK_N = 64
SITES = {"scores": "S = Q K^T * scale in fp32 (the score GEMM's accumulator)",
         "running_sum": "l = l * alpha + rowsum(P) after each 64-key block",
         "accumulator": "acc = acc * alpha + P V after each 64-key block"}


def _online(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, in_dtype: torch.dtype,
            mut: Mutation, mask_of=None) -> torch.Tensor:
    """FA-2 over key blocks: q [..., Lq, D], k and v [..., Lk, D] (fp32, heads matched); mask_of(s, e)
    gives a bool mask [..., Lq, e - s] of the keys to drop, or None. Returns [k, ..., Lq, D]."""
    lk = k.shape[-2]
    m = mut.lift(torch.full(q.shape[:-1], float("-inf")))
    l = mut.lift(torch.zeros(q.shape[:-1]))
    acc = mut.lift(torch.zeros(q.shape))
    for s in range(0, lk, BLOCK_N):
        e = min(s + BLOCK_N, lk)
        scores = mut((q @ k[..., s:e, :].transpose(-1, -2)) * scale, "scores", fresh=True)
        if mask_of is not None:
            drop = mask_of(s, e)
            if drop is not None:
                scores = scores.masked_fill(drop, float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1))
        # a row with every key so far masked keeps m = -inf: its alpha is 1 and its P is 0
        base = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.where(m == m_new, torch.ones_like(m), torch.exp(m - base))
        p = torch.exp(scores - base[..., None])
        l = mut(l * alpha + p.sum(dim=-1), "running_sum")
        pv = p.to(in_dtype).to(torch.float32) @ v[..., s:e, :]
        acc = mut(acc * alpha[..., None] + pv, "accumulator")
        m = m_new
    return acc / l[..., None]


def _heads(t: torch.Tensor, h: int, dim: int) -> torch.Tensor:
    """KV heads repeated to the query heads (grouped-query attention)."""
    return t if t.shape[dim] == h else t.repeat_interleave(h // t.shape[dim], dim=dim)


def _scale(args: Args, d: int) -> float:
    return float(args["scale"]) if args.get("scale") is not None else 1.0 / math.sqrt(d)


def _flash_attention(args: Args, mut: Mutation) -> Outputs:
    q = args["q"]
    h, lq, d = q.shape[-3], q.shape[-2], q.shape[-1]
    k, v = _heads(f32(args["k"]), h, -3), _heads(f32(args["v"]), h, -3)
    mask_of = None
    if args.get("causal"):
        rows = torch.arange(lq)[:, None]

        def mask_of(s: int, e: int) -> Optional[torch.Tensor]:  # top-left aligned: key j > query i drops
            drop = torch.arange(s, e)[None, :] > rows
            return drop if bool(drop.any()) else None
    out = _online(f32(q), k, v, _scale(args, d), q.dtype, mut, mask_of)
    return [(out, case_dtype(args, "q"))]


def _decode_attention(args: Args, mut: Mutation) -> Outputs:
    q = args["q"]  # [B, H, D]
    h, d = q.shape[1], q.shape[2]
    kc, vc = _heads(f32(args["k_cache"]), h, 1), _heads(f32(args["v_cache"]), h, 1)
    lens = args["seq_lens"].long()

    def mask_of(s: int, e: int) -> torch.Tensor:  # positions past seq_lens[b]
        return (torch.arange(s, e)[None, :] >= lens[:, None])[:, None, None, :]  # [B, 1, 1, e - s]
    out = _online(f32(q)[:, :, None, :], kc, vc, _scale(args, d), q.dtype, mut, mask_of)
    return [(out[..., 0, :], case_dtype(args, "q"))]


def _block_elements(q: torch.Tensor, d: int) -> int:
    """One k slice of a block's scores and of the accumulator: rows * (BLOCK_N + D)."""
    return int(q.numel() // max(d, 1)) * (BLOCK_N + d)


KERNELS: Dict[str, MutableKernel] = {k.op: k for k in (
    MutableKernel("flash_attention", "FlashAttention-2: 64-key blocks, online max/sum, P rounded to the input "
                  "dtype before P V, fp32 accumulator", SITES, _flash_attention,
                  work=lambda a: _block_elements(a["q"], a["q"].shape[-1])),
    MutableKernel("decode_attention", "FlashAttention-2 over the KV cache in 64-key blocks, positions past "
                  "seq_lens masked", SITES, _decode_attention,
                  work=lambda a: max(_block_elements(a["q"], a["q"].shape[-1]), a["k_cache"].numel())),
)}
