#!/usr/bin/env bash
# The VS Code extension's suite: installs its exact dependencies from the committed lockfile
# (npm ci), type-checks it, runs its mocha tests (the `vscode` module faked: VS Code itself cannot
# run here), bundles it with esbuild and packages it into dist/gpuemu.vsix with vsce (offline).
# Any step that fails fails `make test`; nothing here is ever skipped.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT/vscode-ext"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "test-ext: $tool is missing (scripts/install-deps.sh installs Node.js and npm)" >&2
    exit 1
  fi
done
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "test-ext: Node.js $(node --version) is too old: vsce 3 needs 20 or later (Debian 12's nodejs is 18)" >&2
  exit 1
fi
npm ci --no-audit --no-fund --loglevel=error
npm test
test -s dist/gpuemu.vsix || { echo "test-ext: dist/gpuemu.vsix was not produced" >&2; exit 1; }
echo "test-ext: $(basename "$ROOT")/vscode-ext built, tested and packaged (dist/gpuemu.vsix)"
