"""Correct rotary embedding (HF/vLLM style): inv_freq = 1 / theta^(2i/D) and the angles
(offset + l) * inv_freq in fp32, cos/sin in fp32, the rotation in fp32, stored in the input dtype.
Both pairings (half: (i, i + D/2); interleaved: (2i, 2i + 1)). It reads theta, style and offset, so a
default run varies all three."""

import torch

from .tiles import F32, load

OP = "rope"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None


def rotate(x, theta, style, offset):
    b, l, h, d = x.shape
    half = d // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=F32) / d))
    pos = torch.arange(l, dtype=F32) + float(offset)
    ang = pos[:, None] * inv_freq[None, :]  # [L, D/2], fp32
    cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    t = load(x)
    if style == "interleaved":
        x1, x2 = t[..., 0::2], t[..., 1::2]
    else:
        x1, x2 = t[..., :half], t[..., half:]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    out = torch.empty(x.shape, dtype=F32)
    if style == "interleaved":
        out[..., 0::2], out[..., 1::2] = o1, o2
    else:
        out[..., :half], out[..., half:] = o1, o2
    return out.to(x.dtype)


def run(inputs):
    return rotate(inputs["x"], inputs["theta"], inputs["style"], inputs["offset"])
