"""Correct gelu, elementwise in fp32: 0.5 x (1 + erf(x / sqrt 2)) for approximate='none', the tanh
form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) for approximate='tanh'; stored in the input
dtype. It reads ``approximate``, so a default run varies it over both values."""

import math

import torch

from .tiles import load

OP = "gelu"
DTYPES = ("float32", "float16", "bfloat16")
BUG = None


def run(inputs):
    x = inputs["x"]
    t = load(x)
    if inputs["approximate"] == "tanh":
        y = 0.5 * t * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t * t * t)))
    else:
        y = 0.5 * t * (1.0 + torch.erf(t * (1.0 / math.sqrt(2.0))))
    return y.to(x.dtype)
