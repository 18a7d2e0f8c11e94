"""gpuemu: catch silently wrong GPU kernels.

gpuemu compares a kernel's output with an fp64 reference computed from the exact low-precision
values the kernel received. This package is its Python side:

- :func:`reference` — the fp64 reference oracle of any op in the catalogue, in process;
- :mod:`gpuemu.dtypes` — exact conversions between float64 and float16/bfloat16/fp8 bits;
- :mod:`gpuemu.rng` — gpuemu's reproducible RNG in pure Python, bit-identical to the C++ one;
- :func:`fuzz_op_in_process` — fuzz an op against a Python kernel, in process;
- :mod:`gpuemu.errors` — the exception hierarchy (:class:`GpuemuError` and its subclasses);
- :class:`Client` — the daemon's client: client-side fuzzing, test batches, stored failures.
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

__all__ = [
    "Client",
    "ClientFailure",
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
]
