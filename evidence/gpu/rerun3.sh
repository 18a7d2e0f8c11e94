#!/usr/bin/env bash
# The CUDA re-run after the model fixes of 2026-12-03 (TF32 subnormal floor, group_norm's direct form,
# SDPA's additive mask) and master seed 4, in two or three device calls (a record of the
# runs of evidence/gpu/conformance.md, "Master seed 4"). On the GPU machine, with .devdeb carried:
#
#   evidence/gpu/rerun3.sh first   build (unless built); run.sh evidence; probe_bf16_subnormal_gemm.py;
#                                 the cells today's fixes touch (TF32 matmul/linear/bmm/conv1d/conv2d,
#                                 boundary and special, master seeds 2-3; group_norm special, seeds 1-3;
#                                 flash_attention boundary, seeds 1-3); capture_cuda.py --unlisted of what
#                                 still fails; then master seed 4 on every op until the deadline
#   evidence/gpu/rerun3.sh more    build (unless built); master seed 4 resumed: the machine's own rows if
#                                 it is still up, else SEED4_JSON (rows carried from the last call)
#
# RERUN_SECONDS (default 570) bounds the whole call; the sweep is stopped in time (finished runs are
# kept). GPUEMU_SWEEP_COMMIT names the commit in the rows. Everything comes back as $OUT/rerun3.tgz
# (and $OUT/seed4.jsonl, $OUT/capture.tgz).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
source scripts/gpu/env.sh
OUT=${OUT:-/tmp/gpuemu-gpu-out}
W=/tmp/gpuemu-rerun3
mkdir -p "$OUT" "$W"
deadline=$((SECONDS + ${RERUN_SECONDS:-570}))
left() { echo $((deadline - SECONDS)); }
phase() { echo "== $1 ($(date -u +%H:%M:%S), $(left) s left)"; }
seed4=/tmp/gpuemu-seed4.jsonl
export GPUEMU_COMMIT=${GPUEMU_SWEEP_COMMIT:-unknown}

if [ ! -x "$GPUEMU_BIN_DIR/gpuemu" ]; then
  phase build
  GPUEMU_GPU_TESTS=OFF scripts/gpu/build.sh > "$W/build.log" 2>&1; echo "build exit $?"; tail -2 "$W/build.log"
else
  echo "built already: $GPUEMU_BIN_DIR"
fi

cells() {  # cells NAME SEEDS ARGS...: one sweep.py invocation into $W/rerun.jsonl
  local name=$1 seeds=$2; shift 2
  phase "re-run: $name"
  timeout -k 5 $(( $(left) - 30 )) python3 -m bench.conformance.sweep --device cuda --seeds "$seeds" --cases 100 \
    --jobs "${SWEEP_JOBS:-14}" --json "$W/rerun.jsonl" --resume "$@" > /dev/null 2>> "$W/rerun.log"
  echo "exit $?; $(wc -l < "$W/rerun.jsonl") rows"
}

case "${1:-first}" in
  first)
    phase evidence
    OUT=$W timeout 200 scripts/gpu/run.sh evidence > /dev/null 2>&1; echo "evidence exit $?"
    grep -E '^- conv|NO LONGER' "$W/evidence_cuda.txt" | cut -c1-400
    phase "probe: bf16 subnormal GEMM"
    timeout 60 python3 evidence/gpu/probe_bf16_subnormal_gemm.py > "$W/probe_bf16_subnormal_gemm.txt" 2>&1
    echo "probe exit $?"
    cells tf32 2 --first-seed 2 --ops matmul linear bmm conv1d conv2d --dtypes float32 --strategies boundary special
    cells group_norm 3 --first-seed 1 --ops group_norm --strategies special
    cells sdpa 3 --first-seed 1 --ops flash_attention --strategies boundary
    python3 -m bench.conformance.sweep --device cuda --report --json "$W/rerun.jsonl" > "$W/rerun.md"
    head -1 "$W/rerun.md"; grep -E '^(FAIL|imprecise)' "$W/rerun.log" | cut -c1-200
    phase "capture (failures outside the lists)"
    timeout 90 python3 -m bench.conformance.capture_cuda "$W/rerun.jsonl" --unlisted --per-row 1 \
      --out "$W/cap" > "$W/capture.log" 2>&1
    echo "capture exit $?"; tail -3 "$W/capture.log"
    tar czf "$OUT/capture.tgz" -C "$W" cap 2>/dev/null
    ls -la "$OUT/capture.tgz"
    [ "$(stat -c %s "$OUT/capture.tgz")" -lt 16000000 ] || { echo "capture.tgz too large: dropped"; rm "$OUT/capture.tgz"; }
    ;;
  more)
    if [ -s "$seed4" ]; then echo "resuming from the machine's $(wc -l < "$seed4") rows"
    elif [ -s "${SEED4_JSON:-}" ]; then cp "$SEED4_JSON" "$seed4"; echo "resuming from $(wc -l < "$seed4") carried rows"
    fi
    ;;
esac

t=$(( $(left) - 25 ))
if [ "$t" -gt 20 ]; then
  phase "master seed 4, every op"
  timeout -k 5 "$t" python3 -m bench.conformance.sweep --device cuda --seeds 1 --first-seed 4 --cases 100 \
    --jobs "${SWEEP_JOBS:-14}" --json "$seed4" --resume > /dev/null 2>> "$W/seed4.log"
  echo "sweep exit $?; $(wc -l < "$seed4") rows"
  grep -E '^FAIL' "$W/seed4.log" | cut -c1-200
fi
cp "$seed4" "$OUT/seed4.jsonl" 2>/dev/null
tar czf "$OUT/rerun3.tgz" -C "$W" --exclude cap . 2>/dev/null; ls -la "$OUT"
phase done
