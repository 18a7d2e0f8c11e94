#!/usr/bin/env bash
# Regenerates the shipped default envelopes, schemas/envelopes.json (docs/calibration.md):
#   scripts/calibrate_envelopes.sh [CASES] [SEED] [OP...]
# One `gpuemu calibrate` per op (each op's result depends only on the op, its dtypes, CASES and
# SEED, so calibrating ops one by one gives the same numbers as one run over all), then the per-op
# tables are merged into schemas/envelopes.json. Naming ops recalibrates only those and keeps the
# others' entries. GPUEMU_BIN overrides the CLI (default build/bin/gpuemu).
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-100}
seed=${2:-12648430}
shift $(( $# < 2 ? $# : 2 ))
bin=${GPUEMU_BIN:-build/bin/gpuemu}
out=schemas/envelopes.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $# -gt 0 ]; then ops=("$@"); else mapfile -t ops < <("$bin" ops list | awk '{print $1}'); fi
for op in "${ops[@]}"; do
  start=$(date +%s)
  GPUEMU_ENVELOPES=/dev/null "$bin" calibrate "$op" --no-daemon --cases "$cases" --seed "$seed" --write "$tmp/$op.json" >"$tmp/$op.txt"
  cat "$tmp/$op.txt"
  echo "  ($op: $(( $(date +%s) - start )) s)" >&2
done
/usr/bin/python3 - "$out" "$cases" "$seed" "$tmp"/*.json <<'PY'
import json, sys
out, cases, seed, parts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
try:
    table = json.load(open(out))
except FileNotFoundError:
    table = {"envelopes": {}}
for p in parts:
    table["envelopes"].update(json.load(open(p))["envelopes"])
table["envelopes"] = dict(sorted(table["envelopes"].items()))
table["generated_by"] = f"scripts/calibrate_envelopes.sh {cases} {seed}"
table["method"] = "per (op, dtype): 1.5 x p95 of the per-case max normalised error over the op's built-in controls, floor 2 (docs/calibration.md)"
with open(out, "w") as f:
    json.dump(table, f, indent=2)
    f.write("\n")
print(f"wrote {out}: {sum(len(v) for v in table['envelopes'].values())} (op, dtype) envelopes")
PY
