#!/usr/bin/env bash
# Builds gpuemu on the GPU machine (Ubuntu 24.04, no network, nothing installable): the Debian 12
# packages it links against travel in .devdeb/ (scripts/gpu/fetch-debs.sh fills it here) and are
# unpacked with dpkg -x into a prefix, not into /. docs/gpu.md says why each step is there.
#
#   scripts/gpu/build.sh            configure and build into $GPUEMU_GPU_BUILD (default /tmp/gpuemu-gpu)
#   source scripts/gpu/env.sh       the environment the built binaries need (LD_LIBRARY_PATH, ...)
#
# GPUEMU_GPU_TESTS=OFF skips the GoogleTest suite (the lint tests that skip without a
# disassembler are the reason to build it there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/gpu/env.sh"
TESTS=${GPUEMU_GPU_TESTS:-ON}

ls "$GPUEMU_DEBS"/*.deb >/dev/null 2>&1 || { echo "build.sh: no .deb files in $GPUEMU_DEBS (scripts/gpu/fetch-debs.sh)" >&2; exit 1; }
mkdir -p "$GPUEMU_PREFIX"
for d in "$GPUEMU_DEBS"/*.deb; do dpkg -x "$d" "$GPUEMU_PREFIX"; done

gen=()
if command -v ninja >/dev/null; then gen=(-G Ninja); fi
lib="$GPUEMU_PREFIX/usr/lib/x86_64-linux-gnu"
cmake -S "$ROOT" -B "$GPUEMU_GPU_BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPUEMU_BUILD_TESTS="$TESTS" -DGPUEMU_BUILD_BENCH=OFF \
  -DCMAKE_PREFIX_PATH="$GPUEMU_PREFIX/usr" -DGTest_DIR="$lib/cmake/GTest" \
  -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v python3)" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$lib -Wl,-rpath-link,$lib/openblas-pthread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$lib -Wl,-rpath-link,$lib/openblas-pthread" >/dev/null
cmake --build "$GPUEMU_GPU_BUILD" -j "$(nproc)" --target gpuemu gpuemu-daemon _core
if [ "$TESTS" = ON ]; then cmake --build "$GPUEMU_GPU_BUILD" -j "$(nproc)" -- -k 0 || echo "build.sh: the C++ tests did not build (the product did)" >&2; fi
echo "build.sh: built into $GPUEMU_GPU_BUILD ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
