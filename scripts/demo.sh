#!/usr/bin/env bash
# The main job: fuzz a built-in buggy softmax (BLOCK=128; its padded tail lanes are loaded as 0
# instead of -inf, so they leak into the max and the denominator) and print the caught failure,
# its seed, the diagnosis, the minimised case and the command that replays it.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/build/bin/gpuemu"
SEED="${GPUEMU_DEMO_SEED:-20261129}"
echo "\$ gpuemu fuzz softmax --kernel tail_leak --no-daemon --seed $SEED --iterations 100"
"$BIN" fuzz softmax --kernel tail_leak --no-daemon --seed "$SEED" --iterations 100
status=$?
if [ "$status" -ne 1 ]; then
  echo "demo: expected the buggy kernel to be caught (exit 1), got exit $status" >&2
  exit 1
fi
echo
echo "The same fuzz against a correct online-softmax kernel:"
echo "\$ gpuemu fuzz softmax --kernel fp32_online --no-daemon --seed $SEED --iterations 100"
"$BIN" fuzz softmax --kernel fp32_online --no-daemon --seed "$SEED" --iterations 100
