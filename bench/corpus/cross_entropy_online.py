"""Correct cross_entropy (Liger-style): per row, an online max/sum over BLOCK-wide class tiles
gives lse = m + log(d); loss = lse - x[target] (with label smoothing: (1 - s) nll +
s (lse - mean x)); ignored rows contribute 0; 'mean' divides the fp32 sum by the number of
non-ignored rows. fp32 math, result stored in the input dtype."""

import torch

from .tiles import F32, load, tiles

OP = "cross_entropy"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None
BLOCK = 1024


def row_losses(x, target, ignore_index, smoothing, subtract_max=True):
    n, c = x.shape
    m = torch.full((n,), float("-inf"), dtype=F32)
    d = torch.zeros(n, dtype=F32)
    sum_x = torch.zeros(n, dtype=F32)
    for s, e in tiles(c, BLOCK):
        t = load(x[:, s:e])
        sum_x += t.sum(dim=1)
        if subtract_max:
            m_new = torch.maximum(m, t.amax(dim=1))
            alpha = torch.where(m == m_new, torch.ones_like(m), torch.exp(m - m_new))
            d = d * alpha + torch.exp(t - m_new[:, None]).sum(dim=1)
            m = m_new
        else:
            d = d + torch.exp(t).sum(dim=1)
    lse = (m + torch.log(d)) if subtract_max else torch.log(d)
    valid = target != ignore_index
    safe = torch.where(valid, target, torch.zeros_like(target))
    x_t = load(x.gather(1, safe[:, None])[:, 0])
    loss = lse - x_t
    if smoothing:
        loss = (1.0 - smoothing) * loss + smoothing * (lse - sum_x / c)
    return torch.where(valid, loss, torch.zeros_like(loss)), valid


def reduce(loss, valid, reduction, dtype):
    if reduction == "none":
        return loss.to(dtype)
    total = loss.sum()
    if reduction == "sum":
        return total.to(dtype)
    return (total / valid.sum().to(F32)).to(dtype)


def run(inputs):
    x, target = inputs["logits"], inputs["target"]
    loss, valid = row_losses(x, target, inputs["ignore_index"], inputs["label_smoothing"])
    return reduce(loss, valid, inputs["reduction"], x.dtype)
