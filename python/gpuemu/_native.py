"""Access to the compiled core, with a clear message when it is not built for this interpreter.

``gpuemu.rng`` and ``gpuemu.errors`` are pure Python and work without it; ``reference`` and the
dtype conversions need it.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Optional

_core: Optional[ModuleType]
try:
    from . import _core
except ImportError as exc:  # not built, or built for another Python
    _core = None
    _IMPORT_ERROR: Optional[ImportError] = exc
else:
    _IMPORT_ERROR = None


def core() -> ModuleType:
    """The compiled ``gpuemu._core`` module; ImportError explaining how to build it if absent."""
    if _core is None:
        raise ImportError(
            "gpuemu._core is not built for this interpreter "
            f"(Python {sys.version_info.major}.{sys.version_info.minor}): run `make build` in the "
            f"gpuemu checkout with this interpreter as Python_EXECUTABLE ({_IMPORT_ERROR})"
        ) from _IMPORT_ERROR
    return _core


def available() -> bool:
    """Whether the compiled core could be imported."""
    return _core is not None
