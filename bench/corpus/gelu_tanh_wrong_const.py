"""BUG (wrong constant): gelu's tanh approximation with 0.044 instead of 0.044715 (fuzzed with
approximate='tanh' pinned). Off by ~1e-4 relative near |x| ~ 1-2, by percents in the far negative
tail where the output is small."""

import math

import torch

from .tiles import load

OP = "gelu"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "wrong_constant"
ATTRS = {"approximate": "tanh"}


def run(inputs):
    x = inputs["x"]
    t = load(x)
    inner = math.sqrt(2.0 / math.pi) * (t + 0.044 * t * t * t)  # the bug: 0.044715
    return (0.5 * t * (1.0 + torch.tanh(inner))).to(x.dtype)
