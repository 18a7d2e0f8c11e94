"""BUG (causal mask alignment): the flash-attention forward of _attention.py with the causal mask
aligned to the bottom right (key j attends query i when j <= i + Lk - Lq, FlashAttention-2's
convention since 2.1) instead of SDPA's top left (j <= i), the schema's. Right when causal is off
or Lq == Lk; wrong for every causal case with Lq != Lk (rows masked entirely when Lq > Lk)."""

from ._attention import forward

OP = "flash_attention"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "mask_alignment"


def run(inputs):
    return forward(inputs, causal_from="bottom_right")
