#!/usr/bin/env bash
# Here (Debian 12, with its archive): downloads the .debs scripts/gpu/build.sh unpacks on the GPU
# machine into .devdeb/ (git-ignored: pass it with the run's carried paths).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$ROOT/.devdeb" && cd "$ROOT/.devdeb"
apt-get download libnng1 libnng-dev libmbedtls14 libmbedx509-1 libmbedcrypto7 libmbedtls-dev liblmdb0 liblmdb-dev \
  nlohmann-json3-dev libspdlog1.10 libspdlog-dev libfmt9 libfmt-dev libcli11-dev libtomlplusplus3 libtomlplusplus-dev \
  libsodium23 libsodium-dev libzstd1 libzstd-dev libopenblas0 libopenblas0-pthread libopenblas-dev \
  libopenblas-pthread-dev libgfortran5 libquadmath0 libgtest-dev libgmock-dev
