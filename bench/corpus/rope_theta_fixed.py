"""BUG (wrong constant): rotary embedding with the frequency base hard-coded to 10000 (the Llama-2
default) instead of the model's theta (500000 for Llama-3, 1e6 for Qwen/Mistral long-context): the
kernel takes theta in its signature and ignores it. Right only for theta = 10000. (A kernel that
never reads theta at all is one that supports only the default, and is not varied over it unless
``vary_attrs`` names it: evidence/attrs/.)"""

from .rope_fp32 import rotate

OP = "rope"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "wrong_constant"


def rotate_fixed_base(x, theta, style, offset):
    del theta  # the bug: the base is the Llama-2 constant whatever the model's theta
    return rotate(x, 10000.0, style, offset)


def run(inputs):
    return rotate_fixed_base(inputs["x"], inputs["theta"], inputs["style"], inputs["offset"])
