"""gpuemu's exceptions.

Every error the engine reports carries a machine-readable code (``gpuemu::ErrorCode`` in
``base/include/gpuemu/base/error.hpp``; the daemon's wire error codes are the same names). Each code maps to
one class here, all under :class:`GpuemuError`, so callers can catch as broadly or as narrowly as
they need::

    GpuemuError
    ├── ValidationError (also a ValueError)      invalid_argument
    │   └── ShapeMismatchError                   shape_mismatch
    ├── UnknownOpError (also a LookupError)      unknown_op
    ├── SchemaError                              schema_error
    ├── NotFoundError (also a LookupError)       not_found
    ├── GpuemuIOError (also an OSError)          io_error
    ├── ToolMissingError                         tool_missing
    ├── InternalError                            internal
    ├── ProtocolError                            protocol_error
    ├── TimeoutError (also the builtin)          timeout
    ├── ConnectError (also a ConnectionError)    unavailable
    ├── ConflictError                            conflict
    └── StorageFullError                         storage_full

The compiled core raises these through :func:`error_from_code`.
"""

from __future__ import annotations

import builtins
from typing import Dict, Optional, Type

__all__ = [
    "GpuemuError",
    "ValidationError",
    "ShapeMismatchError",
    "UnknownOpError",
    "SchemaError",
    "NotFoundError",
    "GpuemuIOError",
    "ToolMissingError",
    "InternalError",
    "ProtocolError",
    "TimeoutError",
    "ConnectError",
    "ConflictError",
    "StorageFullError",
    "error_from_code",
]


class GpuemuError(Exception):
    """Base class of every gpuemu error. ``code`` is the engine's error code name."""

    code: str = "internal"

    def __init__(self, message: str = "", code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # keep code and message through pickling (multiprocessing, pytest-xdist)
        return (type(self), (self.message, self.code))


class ValidationError(GpuemuError, ValueError):
    """A caller's value is wrong: an input, dim, attr or dtype name (``invalid_argument``)."""

    code = "invalid_argument"


class ShapeMismatchError(ValidationError):
    """Tensors whose shapes or dtypes disagree with the op (``shape_mismatch``)."""

    code = "shape_mismatch"


class UnknownOpError(GpuemuError, LookupError):
    """No op schema by that name on the search path (``unknown_op``)."""

    code = "unknown_op"


class SchemaError(GpuemuError):
    """An op schema file is malformed; the message names the file and line (``schema_error``)."""

    code = "schema_error"


class NotFoundError(GpuemuError, LookupError):
    """A stored object (failure, baseline) does not exist (``not_found``)."""

    code = "not_found"


class GpuemuIOError(GpuemuError, OSError):
    """A file could not be read or written (``io_error``)."""

    code = "io_error"


class ToolMissingError(GpuemuError):
    """An external tool (nvcc, ptxas, python) is absent (``tool_missing``)."""

    code = "tool_missing"


class InternalError(GpuemuError):
    """A bug in gpuemu (``internal``); please report it with the message."""

    code = "internal"


class ProtocolError(GpuemuError):
    """A malformed or unsupported wire message, or a client/daemon version mismatch (``protocol_error``)."""

    code = "protocol_error"


class TimeoutError(GpuemuError, builtins.TimeoutError):  # noqa: A001 (shadows the builtin on purpose)
    """A request, a kernel script or a daemon start took too long (``timeout``)."""

    code = "timeout"


class ConnectError(GpuemuError, ConnectionError):
    """No daemon answers on the socket and none could be started (``unavailable``)."""

    code = "unavailable"


class ConflictError(GpuemuError):
    """Another daemon owns this GPUEMU_HOME, or a stored object clashes (``conflict``)."""

    code = "conflict"


class StorageFullError(GpuemuError):
    """The failure store cannot grow: the disk or the map limit is full (``storage_full``)."""

    code = "storage_full"


_BY_CODE: Dict[str, Type[GpuemuError]] = {
    cls.code: cls
    for cls in (
        ValidationError,
        ShapeMismatchError,
        UnknownOpError,
        SchemaError,
        NotFoundError,
        GpuemuIOError,
        ToolMissingError,
        InternalError,
        ProtocolError,
        TimeoutError,
        ConnectError,
        ConflictError,
        StorageFullError,
    )
}


def error_from_code(code: str, message: str) -> GpuemuError:
    """The exception for an engine error code (an unknown code gives a plain GpuemuError)."""
    cls = _BY_CODE.get(code, GpuemuError)
    return cls(message, code)
