#!/usr/bin/env bash
# Builds and installs the gpuemu wheel on the GPU machine (Ubuntu 24.04, its own Python 3.12 with
# numpy and torch, no network): `pip install --no-build-isolation .` into a fresh venv that sees the
# system's packages, with the Debian libraries of .devdeb/ unpacked into a prefix (as build.sh does).
#
#   scripts/gpu/wheel.sh [VENV]   a fresh venv made by python3 with --system-site-packages; without
#                                 VENV, into python3's own environment (where the machine's torch is)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/gpu/env.sh"
VENV=${1:-}
mkdir -p "$GPUEMU_PREFIX"
for d in "$GPUEMU_DEBS"/*.deb; do dpkg -x "$d" "$GPUEMU_PREFIX"; done
lib="$GPUEMU_PREFIX/usr/lib/x86_64-linux-gnu"
link="-Wl,-rpath-link,$lib -Wl,-rpath-link,$lib/openblas-pthread"
export CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$GPUEMU_PREFIX/usr '-DCMAKE_EXE_LINKER_FLAGS=$link' '-DCMAKE_SHARED_LINKER_FLAGS=$link'"
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
PY=$(command -v python3)
if [ -n "$VENV" ]; then python3 -m venv --system-site-packages "$VENV"; PY="$VENV/bin/python"; fi
unset PYTHONPATH  # the installed package, not the source tree
cd "$ROOT"
"$PY" -m pip install --no-build-isolation --no-index --no-deps .
echo "wheel.sh: installed into $("$PY" -c 'import sys; print(sys.prefix)') ($(cd / && "$PY" -c 'import gpuemu; print(gpuemu.__version__, gpuemu.__file__)'))"
