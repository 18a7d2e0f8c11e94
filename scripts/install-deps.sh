#!/usr/bin/env bash
# Installs, from the distribution's archive, whatever gpuemu needs that is missing: Debian 12
# (bookworm, where CI runs) and Ubuntu 24.04 (noble, the GPU hosts). It prints what it will install
# before it does. Idempotent and quiet when everything is already there.
#
# The names differ between the two in three places (checked against packages.ubuntu.com's noble
# pages, 2026-12-02): clang's sanitizer runtime is versioned like the default clang
# (libclang-rt-14-dev on Debian 12, libclang-rt-18-dev on Ubuntu 24.04); Ubuntu's chromium is a snap
# (chromium-browser), which containers cannot run: there the browser check of the HTML report needs
# GPUEMU_CHROMIUM pointing at a browser; and Ubuntu 24.04 has no python3-torch (it arrives in later
# releases): there the Python suites need torch in the interpreter (a GPU host's own pip torch).
# Every other name below exists in both.
#
#   scripts/install-deps.sh              install what is missing
#   scripts/install-deps.sh --dry-run    only say what it would install
#   scripts/install-deps.sh --list       print every package it needs here, one per line
#   (GPUEMU_OS_RELEASE: another os-release file, to see another distribution's names)
set -euo pipefail
DRY_RUN=0 LIST=0
case "${1:-}" in --dry-run) DRY_RUN=1 ;; --list) LIST=1 ;; esac

ID="unknown"; VERSION_ID=""
OS_RELEASE=${GPUEMU_OS_RELEASE:-/etc/os-release}
if [ -r "$OS_RELEASE" ]; then . "$OS_RELEASE"; fi
case "$ID:$VERSION_ID" in
  debian:12*) CLANG_RT=libclang-rt-14-dev; BROWSER=chromium; TORCH=python3-torch ;;
  ubuntu:24.04*) CLANG_RT=libclang-rt-18-dev; BROWSER=""; TORCH="" ;;
  *)
    echo "install-deps: $ID $VERSION_ID is neither Debian 12 nor Ubuntu 24.04; trying Debian 12's names" >&2
    CLANG_RT=libclang-rt-14-dev; BROWSER=chromium; TORCH=python3-torch ;;
esac

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libnng-dev nng-utils liblmdb-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libcli11-dev libtomlplusplus-dev libzstd-dev libsodium-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # the fuzz targets (tests/fuzz/run.sh): clang with libFuzzer and the sanitizers' runtime
  clang "$CLANG_RT"
  python3 python3-venv python3-dev python3-pybind11 pybind11-dev
  python3-numpy python3-pytest python3-pytest-xdist python3-hypothesis python3-jsonschema
  # the editor side: the HTML report is checked in a real browser (screenshot pixels via PIL);
  # the VS Code extension is built with Node.js and npm: the Node 20 these machines come with is
  # kept; Debian's nodejs (18) is only a fallback, and scripts/test-ext.sh says when it is too old
  python3-pil
  # pip install . (setup.py drives CMake) and make package (CPack's .deb, dpkg-shlibdeps)
  python3-setuptools python3-wheel python3-pip dpkg-dev
  # the multi-host test (tests/python/test_scale_netns.py): network namespaces and veth links
  iproute2
)
if [ -n "$BROWSER" ]; then PACKAGES+=("$BROWSER"); fi
if [ -n "$TORCH" ]; then PACKAGES+=("$TORCH"); fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi
if [ $LIST -eq 1 ]; then printf '%s\n' "${PACKAGES[@]}"; exit 0; fi

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

if [ -z "$TORCH" ] && ! /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
  echo "install-deps: $ID $VERSION_ID has no python3-torch package: the Python suites need torch" \
       "in the interpreter they run under (pip install torch)" >&2
fi

if [ ${#missing[@]} -eq 0 ]; then
  [ $DRY_RUN -eq 0 ] || echo "install-deps: $ID $VERSION_ID: nothing to install" >&2
  exit 0
fi
if [ $DRY_RUN -eq 1 ]; then
  echo "install-deps: $ID $VERSION_ID lacks ${#missing[@]} package(s); would install with apt-get:" >&2
  echo "  ${missing[*]}" >&2
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
