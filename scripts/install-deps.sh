#!/usr/bin/env bash
# Installs, from Debian's archive, whatever gpuemu needs that is missing.
# Idempotent and quiet when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libnng-dev nng-utils liblmdb-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libcli11-dev libtomlplusplus-dev libzstd-dev libsodium-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # the fuzz targets (tests/fuzz/run.sh): clang with libFuzzer and the sanitizers' runtime
  clang libclang-rt-14-dev
  python3 python3-venv python3-dev python3-pybind11 pybind11-dev
  python3-numpy python3-pytest python3-hypothesis python3-jsonschema python3-torch
  # the editor side: the HTML report is checked in a real browser (screenshot pixels via PIL);
  # the VS Code extension is built with Node.js and npm: the Node 20 these machines come with is
  # kept; Debian's nodejs (18) is only a fallback, and scripts/test-ext.sh says when it is too old
  chromium python3-pil
)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
