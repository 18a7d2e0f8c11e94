"""gpuemu: catch silently wrong GPU kernels.

gpuemu compares a kernel's output with an fp64 reference computed from the exact low-precision
values the kernel received. This package is its Python side:

- :func:`reference` — the fp64 reference oracle of any op in the catalogue, in process;
- :mod:`gpuemu.dtypes` — exact conversions between float64 and float16/bfloat16/fp8 bits;
- :mod:`gpuemu.rng` — gpuemu's reproducible RNG in pure Python, bit-identical to the C++ one;
- :func:`fuzz_op_in_process` — fuzz an op against a Python kernel, in process;
- :mod:`gpuemu.errors` — the exception hierarchy (:class:`GpuemuError` and its subclasses);
- :class:`Client` — the daemon's client: client-side fuzzing, test batches, stored failures;
- :func:`torch_op` — an op made from the PyTorch code a kernel replaces (imports torch on first use);
- :mod:`gpuemu.kernelbench` — KernelBench's format: problems, candidates, verdicts against reward hacks.
"""

from . import dtypes, errors, rng
from ._reference import op_schema, oracle, ops, reference, reload_catalogue, set_oracle
from .dtypes import from_bits, round_to, to_bits
from .inprocess import Failure, FuzzResults, fuzz_op_in_process
from .client import Client, ClientFailure, Verdict
from .errors import (
    ConflictError,
    ConnectError,
    GpuemuError,
    GpuemuIOError,
    InternalError,
    NotFoundError,
    ProtocolError,
    SchemaError,
    ShapeMismatchError,
    StorageFullError,
    TimeoutError,
    ToolMissingError,
    UnknownOpError,
    ValidationError,
)
from .rng import Rng, derive_seed

from ._core import __version__  # VERSION at the top of the tree, through CMake (one number everywhere)


def __getattr__(name: str):
    """``torch_op`` and ``TorchOp`` import torch when first asked for (``import gpuemu`` does not)."""
    if name in ("torch_op", "TorchOp"):
        from . import torch_ops

        return getattr(torch_ops, name)
    raise AttributeError(f"module 'gpuemu' has no attribute {name!r}")


def __dir__():
    """The module's names, with the two that :func:`__getattr__` imports on first use."""
    return sorted(set(globals()) | {"torch_op", "TorchOp"})

__all__ = [
    "Client",
    "ClientFailure",
    "TorchOp",
    "ConflictError",
    "ConnectError",
    "ProtocolError",
    "StorageFullError",
    "TimeoutError",
    "Verdict",
    "Failure",
    "FuzzResults",
    "fuzz_op_in_process",
    "GpuemuError",
    "GpuemuIOError",
    "InternalError",
    "NotFoundError",
    "Rng",
    "SchemaError",
    "ShapeMismatchError",
    "ToolMissingError",
    "UnknownOpError",
    "ValidationError",
    "__version__",
    "derive_seed",
    "dtypes",
    "errors",
    "from_bits",
    "op_schema",
    "ops",
    "oracle",
    "reference",
    "set_oracle",
    "reload_catalogue",
    "rng",
    "round_to",
    "to_bits",
    "torch_op",
]
