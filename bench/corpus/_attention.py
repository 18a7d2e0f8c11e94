"""The flash-attention forward shared by the attention kernels of the corpus (FlashAttention-2 /
the Triton tutorial): for each BLOCK_N-wide block of keys, S = Q K^T * scale in fp32, the running
row max m and sum l, P = exp(S - m_new) rounded to the input dtype before the P V product (as the
kernels feed P to ``tl.dot`` in fp16/bf16), acc rescaled by alpha = exp(m - m_new), out = acc / l.
The buggy variants switch off one line each; see the modules that call it."""

import torch

from .tiles import F32, attn_scale, load, tiles

BLOCK_N = 64


def forward(inputs, *, apply_scale=True, rescale_acc=True, causal_from="top_left"):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    causal, scale = inputs["causal"], inputs["scale"]
    b, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    if hkv != h:  # grouped-query attention: query head i reads KV head i // (H / Hkv)
        idx = torch.arange(h) // (h // hkv)
        k, v = k[:, idx], v[:, idx]
    sm_scale = attn_scale(scale, d) if apply_scale else 1.0
    qf = load(q)
    m = torch.full((b, h, lq), float("-inf"), dtype=F32)
    l = torch.zeros(b, h, lq, dtype=F32)
    acc = torch.zeros(b, h, lq, d, dtype=F32)
    # causal_from="bottom_right": the mask FlashAttention-2 (>= 2.1) applies, key j <= i + Lk - Lq,
    # where SDPA's is_causal (the schema's) is j <= i: the two agree only when Lq == Lk.
    shift = lk - lq if causal_from == "bottom_right" else 0
    rows = torch.arange(lq)[:, None] + shift
    for s, e in tiles(lk, BLOCK_N):
        if causal and s > lq - 1 + shift:
            break  # blocks past the diagonal are never loaded
        scores = (qf @ load(k[:, :, s:e]).transpose(-1, -2)) * sm_scale
        if causal:
            scores = scores.masked_fill(torch.arange(s, e)[None, :] > rows, float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1))
        alpha = torch.where(m == m_new, torch.ones_like(m), torch.exp(m - m_new))
        p = torch.exp(scores - m_new[..., None])
        l = l * alpha + p.sum(dim=-1)
        pv = p.to(q.dtype).to(F32) @ load(v[:, :, s:e])
        acc = acc * alpha[..., None] + pv if rescale_acc else acc + pv
        m = m_new
    return (acc / l[..., None]).to(q.dtype)
