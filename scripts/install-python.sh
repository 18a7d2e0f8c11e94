#!/usr/bin/env bash
# Makes `import gpuemu` work in the given interpreter's environment: a .pth file pointing at
# python/ (where the build also puts the compiled gpuemu._core).
set -euo pipefail
PY="${1:-.venv/bin/python}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$ROOT/python" > "$SITE/gpuemu.pth"
