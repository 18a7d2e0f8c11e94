#!/usr/bin/env bash
# Installs, from the distribution's archive, whatever gpuemu needs that is missing: Debian 12
# (bookworm, where CI runs) and Ubuntu 24.04 (noble, the GPU hosts). It prints what it will install
# before it does. Idempotent and quiet when everything is already there.
#
# The names differ between the two in two places: clang's sanitizer runtime is versioned like the
# default clang (libclang-rt-14-dev on Debian 12, libclang-rt-18-dev on Ubuntu 24.04), and Ubuntu's
# chromium is a snap (chromium-browser), which containers cannot run: there the browser check of the
# HTML report needs GPUEMU_CHROMIUM pointing at a browser, and this script says so.
set -euo pipefail

ID="unknown"; VERSION_ID=""
if [ -r /etc/os-release ]; then . /etc/os-release; fi
case "$ID:$VERSION_ID" in
  debian:12*) CLANG_RT=libclang-rt-14-dev; BROWSER=chromium ;;
  ubuntu:24.04*) CLANG_RT=libclang-rt-18-dev; BROWSER="" ;;
  *)
    echo "install-deps: $ID $VERSION_ID is neither Debian 12 nor Ubuntu 24.04; trying Debian 12's names" >&2
    CLANG_RT=libclang-rt-14-dev; BROWSER=chromium ;;
esac

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libnng-dev nng-utils liblmdb-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libcli11-dev libtomlplusplus-dev libzstd-dev libsodium-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # the fuzz targets (tests/fuzz/run.sh): clang with libFuzzer and the sanitizers' runtime
  clang "$CLANG_RT"
  python3 python3-venv python3-dev python3-pybind11 pybind11-dev
  python3-numpy python3-pytest python3-pytest-xdist python3-hypothesis python3-jsonschema python3-torch
  # the editor side: the HTML report is checked in a real browser (screenshot pixels via PIL);
  # the VS Code extension is built with Node.js and npm: the Node 20 these machines come with is
  # kept; Debian's nodejs (18) is only a fallback, and scripts/test-ext.sh says when it is too old
  python3-pil
  # pip install . (setup.py drives CMake) and make package (CPack's .deb, dpkg-shlibdeps)
  python3-setuptools python3-wheel python3-pip dpkg-dev
)
if [ -n "$BROWSER" ]; then PACKAGES+=("$BROWSER"); fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ -z "$BROWSER" ] && [ -z "${GPUEMU_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "install-deps: no chromium here ($ID $VERSION_ID ships it as a snap): the HTML report's browser" \
       "check needs GPUEMU_CHROMIUM=/path/to/chromium" >&2
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

echo "install-deps: $ID $VERSION_ID lacks ${#missing[@]} package(s); installing with apt-get:" >&2
echo "  ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
unknown=()
for p in "${missing[@]}"; do
  apt-cache show "$p" >/dev/null 2>&1 || unknown+=("$p")
done
if [ ${#unknown[@]} -gt 0 ]; then
  echo "install-deps: the archive of $ID $VERSION_ID has no package named: ${unknown[*]}" >&2
  exit 1
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
