"""BUG (position offset): rotary embedding that takes the decode step's offset and starts the
positions at 0 anyway (``pos = arange(L)``, the ``+ offset`` forgotten): right for a prefill
(offset 0), wrong for every decode step. The kernel reads ``offset`` (it is in its signature), so
a default run varies it after the first case."""

from .rope_fp32 import rotate

OP = "rope"
DTYPES = ("float32", "float16", "bfloat16")
BUG = "position_offset"


def run(inputs):
    offset = inputs["offset"]  # handed to the kernel ...
    del offset  # ... which never adds it to the positions: the bug
    return rotate(inputs["x"], inputs["theta"], inputs["style"], 0)
