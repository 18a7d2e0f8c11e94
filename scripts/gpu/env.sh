# The environment gpuemu needs on the GPU machine (sourced by scripts/gpu/build.sh and run.sh).
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
export GPUEMU_DEBS=${GPUEMU_DEBS:-$ROOT/.devdeb}
export GPUEMU_PREFIX=${GPUEMU_PREFIX:-/tmp/gpuemu-prefix}
export GPUEMU_GPU_BUILD=${GPUEMU_GPU_BUILD:-/tmp/gpuemu-gpu}
_lib="$GPUEMU_PREFIX/usr/lib/x86_64-linux-gnu"
export PKG_CONFIG_SYSROOT_DIR="$GPUEMU_PREFIX"
export PKG_CONFIG_PATH="$_lib/pkgconfig:$_lib/openblas-pthread/pkgconfig:$GPUEMU_PREFIX/usr/share/pkgconfig"
export LD_LIBRARY_PATH="$_lib:$_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPUEMU_BIN_DIR="$GPUEMU_GPU_BUILD/bin"
export PYTHONPATH="$ROOT/python:$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # bench is imported as a package
export GPUEMU_HOME=${GPUEMU_HOME:-/tmp/gpuemu-home}
export PATH="/usr/local/cuda/bin:$PATH"
unset _lib
