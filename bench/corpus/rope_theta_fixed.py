"""BUG (wrong constant): rotary embedding with the frequency base hard-coded to 10000 (the Llama-2
default) instead of the model's theta (500000 for Llama-3, 1e6 for Qwen/Mistral long-context).
Fuzzed with theta varied; right only for theta = 10000."""

from .rope_fp32 import rotate

OP = "rope"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "wrong_constant"
VARY_ATTRS = ("theta",)


def run(inputs):
    return rotate(inputs["x"], 10000.0, inputs["style"], inputs["offset"])  # the bug: inputs["theta"]
