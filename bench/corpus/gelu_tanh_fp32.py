"""Correct gelu, tanh approximation only (a kernel written for approximate='tanh', fuzzed with that
attr pinned): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in fp32."""

import math

import torch

from .tiles import load

OP = "gelu"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None
ATTRS = {"approximate": "tanh"}


def run(inputs):
    x = inputs["x"]
    t = load(x)
    inner = math.sqrt(2.0 / math.pi) * (t + 0.044715 * t * t * t)
    return (0.5 * t * (1.0 + torch.tanh(inner))).to(x.dtype)
