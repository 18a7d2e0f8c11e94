#!/usr/bin/env bash
# The main job, through the daemon: fuzz a built-in buggy softmax (BLOCK=128; its padded tail
# lanes are loaded as 0 instead of -inf, so they leak into the max and the denominator), print the
# caught failure, its seed, the diagnosis, the minimised case and the command that replays it;
# then replay the stored failure byte for byte.
#
# The daemon runs in its own GPUEMU_HOME (build/demo-home unless GPUEMU_HOME is set) and is
# stopped at the end.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPUEMU_BIN:-$ROOT/build/bin/gpuemu}"
SEED="${GPUEMU_DEMO_SEED:-20261129}"
export GPUEMU_HOME="${GPUEMU_HOME:-$ROOT/build/demo-home}"
trap '"$BIN" daemon stop >/dev/null 2>&1' EXIT

echo "\$ gpuemu fuzz softmax --kernel tail_leak --seed $SEED --iterations 100"
out="$("$BIN" fuzz softmax --kernel tail_leak --seed "$SEED" --iterations 100)"
status=$?
echo "$out"
if [ "$status" -ne 1 ]; then
  echo "demo: expected the buggy kernel to be caught (exit 1), got exit $status" >&2
  exit 1
fi
id="$(echo "$out" | sed -n 's/^  stored: *//p' | head -1)"
echo
echo "The failure is stored in the daemon's LMDB store; replay it from its exact bytes and regenerate it from its seed:"
echo "\$ gpuemu repro $id"
"$BIN" repro "$id"
[ $? -eq 1 ] || { echo "demo: the stored failure did not reproduce" >&2; exit 1; }
echo
echo "The same fuzz against a correct online-softmax kernel:"
echo "\$ gpuemu fuzz softmax --kernel fp32_online --seed $SEED --iterations 100"
"$BIN" fuzz softmax --kernel fp32_online --seed "$SEED" --iterations 100
