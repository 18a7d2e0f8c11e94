"""The wheel's console scripts: `gpuemu` and `gpuemu-daemon` exec the binaries the wheel carries
(gpuemu/bin/), which find the schemas beside them (gpuemu/share/gpuemu/). Script kernels run under
this interpreter unless $GPUEMU_PYTHON says otherwise."""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"


def _exec(name: str) -> None:
    exe = BIN / name
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"{name}: not found in {BIN} (this gpuemu package was not built as a wheel; "
                         f"use the build tree's build/bin/{name})\n")
        sys.exit(127)
    os.environ.setdefault("GPUEMU_PYTHON", sys.executable)
    os.environ.setdefault("GPUEMU_DAEMON", str(BIN / "gpuemu-daemon"))
    os.execv(str(exe), [name, *sys.argv[1:]])


def cli() -> None:
    _exec("gpuemu")


def daemon() -> None:
    _exec("gpuemu-daemon")
