#!/usr/bin/env bash
# The CUDA Conformance sweep's cells that had not run since the model fixes of 6acc208 (issue 17,
# 2026-12-02), in one or two device calls, on the GPU machine after scripts/gpu/build.sh. A record of
# the runs of evidence/gpu/conformance.md ("Master seed 1"), kept as it ran but for its paths:
#
#   evidence/gpu/rerun2.sh first    run.sh evidence; capture_cuda.py of the conv1d/conv2d failures the
#                                  re-run left open (conformance_cuda_rerun.jsonl.gz, --settings);
#                                  then the sweep, highest priority first (SDPA backends, rms_norm, ...)
#   evidence/gpu/rerun2.sh more     the sweep resumed (the rows of the machine's last call if it is still
#                                  up, else conformance_cuda_rerun2.jsonl.gz); then capture_cuda.py
#                                  --unlisted of every new failing run (one case each)
#   evidence/gpu/rerun2.sh early    run.sh evidence; evidence/gpu/probe_cuda_rerun2.py; then the ops
#                                  before the alphabet's middle that the re-run at 6acc208 left out (every
#                                  dtype), resumed from conformance_cuda_rerun*.jsonl.gz; capture as in more
#
# Seed 1 (master seed 20261201), 100 cases, every dtype and strategy of the named ops. RERUN_SECONDS
# (default 570) bounds the whole call: the sweep is stopped in time (timeout kills its process group;
# finished runs are kept) and what was done is copied to $OUT. GPUEMU_SWEEP_COMMIT names the commit
# in the rows (the device's copy has no .git).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
source scripts/gpu/env.sh
OUT=${OUT:-/tmp/gpuemu-gpu-out}
mkdir -p "$OUT"
start=$SECONDS
deadline=$((start + ${RERUN_SECONDS:-570}))
left() { echo $((deadline - SECONDS)); }
phase() { echo "== $1 ($(date -u +%H:%M:%S), $(left) s left)"; }
json=/tmp/gpuemu-rerun2.jsonl
# the priority order: the SDPA backends and F.rms_norm first, then the ops after the alphabet's middle
OPS_FIRST=(flash_attention rms_norm l2norm layer_norm leaky_relu linear log log_softmax logsumexp)
OPS_REST=(matmul mean mul relu rope rsqrt scaled_fp8_matmul sigmoid silu softmax softplus sqrt sum swiglu tanh)
OPS_EARLY=(add amax argmax bmm conv1d conv2d cross_entropy cumsum decode_attention elu embedding exp fp8_quantize geglu gelu)

pack() {  # pack NAME DIR: DIR as $OUT/NAME.tgz, split into parts of 15 MiB if larger
  tar czf "/tmp/$1.tgz" -C "$(dirname "$2")" "$(basename "$2")" 2>/dev/null || return 0
  if [ "$(stat -c %s "/tmp/$1.tgz")" -gt 15000000 ]; then split -b 15M "/tmp/$1.tgz" "$OUT/$1.tgz."
  else cp "/tmp/$1.tgz" "$OUT/"; fi
  ls -la "$OUT" | grep "$1"
}

sweep() {  # sweep OPS...: until the deadline less a reserve
  local t=$(( $(left) - ${RESERVE:-20} ))
  [ "$t" -gt 10 ] || { echo "no time left for: $*"; return 0; }
  phase "sweep ($*)"
  timeout -k 5 "$t" python3 -m bench.conformance.sweep --device cuda --seeds 1 --cases 100 \
    --jobs "${SWEEP_JOBS:-14}" --ops "$@" --json "$json" --resume >/dev/null 2>> "$OUT/sweep.log"
  echo "sweep exit $?; $(wc -l < "$json") rows"
}

case "${1:-first}" in
  first)
    # the rows already re-run at 6acc208 are skipped (--resume reads them) and dropped afterwards
    zcat evidence/gpu/conformance/conformance_cuda_rerun.jsonl.gz > "$json"
    phase evidence
    timeout 150 scripts/gpu/run.sh evidence > /dev/null 2>&1; echo "evidence exit $?"
    cat "$OUT/evidence_cuda.txt" 2>/dev/null | grep -i group_norm
    phase "capture (conv open)"
    zcat evidence/gpu/conformance/conformance_cuda_rerun.jsonl.gz > /tmp/rerun_rows.jsonl
    timeout 150 python3 -m bench.conformance.capture_cuda /tmp/rerun_rows.jsonl \
      --only conv1d conv2d --per-row 2 --settings --out /tmp/cap_open > "$OUT/capture_open.log" 2>&1
    echo "capture exit $?"; pack capture_open /tmp/cap_open
    RESERVE=15 sweep "${OPS_FIRST[@]}"
    RESERVE=15 sweep "${OPS_REST[@]}"
    ;;
  early)
    zcat evidence/gpu/conformance/conformance_cuda_rerun.jsonl.gz evidence/gpu/conformance/conformance_cuda_rerun2.jsonl.gz > "$json"
    phase evidence
    timeout 150 scripts/gpu/run.sh evidence > /dev/null 2>&1; echo "evidence exit $?"
    grep -E '^- (logsumexp|scaled_fp8|group_norm)' "$OUT/evidence_cuda.txt"
    phase probe
    timeout 120 python3 evidence/gpu/probe_cuda_rerun2.py > "$OUT/probe_cuda_rerun2.txt" 2>&1; echo "probe exit $?"
    cat "$OUT/probe_cuda_rerun2.txt"
    RESERVE=${CAPTURE_SECONDS:-100} sweep "${OPS_EARLY[@]}"
    ;;&
  more|early)
    if [ "$1" = early ]; then :
    elif [ -s "$json" ]; then echo "resuming from the machine's $(wc -l < "$json") rows"
    elif [ -s evidence/gpu/conformance/conformance_cuda_rerun2.jsonl.gz ]; then
      zcat evidence/gpu/conformance/conformance_cuda_rerun.jsonl.gz evidence/gpu/conformance/conformance_cuda_rerun2.jsonl.gz > "$json"
    else zcat evidence/gpu/conformance/conformance_cuda_rerun.jsonl.gz > "$json"; fi
    [ "$1" = early ] || RESERVE=${CAPTURE_SECONDS:-120} sweep "${OPS_FIRST[@]}" "${OPS_REST[@]}"
    phase "capture (new failures outside the list)"
    python3 - "$json" "${GPUEMU_SWEEP_COMMIT:-}" > /tmp/new_rows.jsonl <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if line.strip() and json.loads(line).get("gpuemu") == sys.argv[2]:
        print(line.strip())
EOF
    timeout $(( $(left) - 10 )) python3 -m bench.conformance.capture_cuda /tmp/new_rows.jsonl --unlisted \
      --per-row 1 --out /tmp/cap_new > "$OUT/capture_new.log" 2>&1
    echo "capture exit $?"; pack capture_new /tmp/cap_new
    ;;
esac
cp "$json" "$OUT/rerun2_all.jsonl"
grep -E '^(FAIL|imprecise)' "$OUT/sweep.log" | cut -c1-220
phase done
