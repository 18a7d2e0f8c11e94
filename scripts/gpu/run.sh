#!/usr/bin/env bash
# The GPU suites, on the GPU machine, after scripts/gpu/build.sh. Results go to $OUT (default
# /tmp/gpuemu-gpu-out): Markdown tables, JSON lines and logs, each naming the commit it ran at.
#
#   scripts/gpu/run.sh lint          the C++ lint tests that need a disassembler, and gpuemu lint on the
#                                    corpus's Triton cubins against cuobjdump -res-usage
#   scripts/gpu/run.sh corpus        the Triton / CuPy / JAX corpus (python3 -m bench.gpu.corpus)
#   scripts/gpu/run.sh conformance   the Conformance sweep on CUDA (python3 -m bench.conformance.sweep --device cuda;
#                                    SWEEP_DEVICE=cpu: PyTorch's CPU kernels on this machine's cores)
#   scripts/gpu/run.sh evidence      the demonstrations of imprecise_cuda.py (sweep.py --device cuda --evidence)
#   scripts/gpu/run.sh oracle        the fp64 oracle on the GPU: agreement with the CPU (GpuOracle.*), the race
#                                    against the CPU oracle (bench_oracle_gpu), verdicts of a cuda-oracle daemon
#   scripts/gpu/run.sh backward      fuzz_op_client_side(..., backward=True, device="cuda") on correct and buggy
#                                    autograd kernels (python3 -m bench.gpu.backward_client; BACKWARD_ARGS passed on)
#   scripts/gpu/run.sh classify      which step makes SDPA math's native fp16/bf16 backward fail
#                                    (evidence/gpu/classify_sdpa_math_backward.py; CLASSIFY_ARGS passed on)
#   scripts/gpu/run.sh classify-efficient  why SDPA's memory-efficient backward fails under backward=True
#                                    (evidence/gpu/classify_sdpa_efficient_backward.py; CLASSIFY_ARGS passed on)
#   scripts/gpu/run.sh kernelbench   gpuemu kernelbench --device cuda on the Triton candidates of bench/kernelbench/gpu/
#   scripts/gpu/run.sh all           all seven (not classify, classify-efficient)
#
# CORPUS_JOBS, CORPUS_DEADLINE, SWEEP_SEEDS, SWEEP_CASES, SWEEP_JOBS tune the runs; SWEEP_ARGS is
# passed on to sweep.py (e.g. "--ops matmul bmm --strategies adversarial"). Python runs from the repository
# root with PYTHONPATH=$ROOT/python:$ROOT (env.sh): bench is a package, evidence/gpu/ holds the one-off scripts.
# docs/gpu.md says what each suite showed; evidence/gpu/ keeps the results.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
source scripts/gpu/env.sh
OUT=${OUT:-/tmp/gpuemu-gpu-out}
mkdir -p "$OUT"
export GPUEMU_COMMIT=${GPUEMU_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || cat .gpu-commit 2>/dev/null || echo unknown)}
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX shares the GPU with torch and CuPy
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/gpuemu-triton-cache}
status=0

[ -x "$GPUEMU_BIN_DIR/gpuemu" ] || { echo "run.sh: $GPUEMU_BIN_DIR/gpuemu is not built (scripts/gpu/build.sh)" >&2; exit 1; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  echo "commit $GPUEMU_COMMIT"; } > "$OUT/machine.txt" 2>&1
"$GPUEMU_BIN_DIR/gpuemu" daemon start >/dev/null 2>&1 || true

phase() { echo "== $1 ($(date -u +%H:%M:%S))"; }
what=${1:-all}
if [ "$what" = corpus ] || [ "$what" = all ]; then
  phase corpus
  python3 -m bench.gpu.corpus --json "$OUT/corpus.jsonl" --markdown "$OUT/corpus.md" \
    --jobs "${CORPUS_JOBS:-10}" --deadline "${CORPUS_DEADLINE:-0}" > "$OUT/corpus.log" 2>&1 || status=1
  tail -5 "$OUT/corpus.md" 2>/dev/null
fi
if [ "$what" = conformance ] || [ "$what" = all ]; then
  # SWEEP_DEVICE=cpu runs the sweep of PyTorch's CPU kernels on this machine's cores (its torch, not
  # the development machine's); the default, cuda, runs the implementations on the GPU.
  dev=${SWEEP_DEVICE:-cuda}
  phase "conformance ($dev)"
  # SWEEP_SECONDS bounds the run (the runs finished by then are kept; --resume with SWEEP_JSON
  # continues a sweep carried from an earlier run)
  json=${SWEEP_JSON:-$OUT/conformance_$dev.jsonl}
  [ "$json" = "$OUT/conformance_$dev.jsonl" ] || cp "$json" "$OUT/conformance_$dev.jsonl"
  timeout "${SWEEP_SECONDS:-3600}" python3 -m bench.conformance.sweep --device "$dev" --seeds "${SWEEP_SEEDS:-5}" \
    --cases "${SWEEP_CASES:-100}" --jobs "${SWEEP_JOBS:-12}" --json "$OUT/conformance_$dev.jsonl" --resume ${SWEEP_ARGS:-} \
    > /dev/null 2> "$OUT/conformance_$dev.log"
  python3 -m bench.conformance.sweep --device "$dev" --report --json "$OUT/conformance_$dev.jsonl" > "$OUT/conformance_$dev.md" || status=1
  head -1 "$OUT/conformance_$dev.md"; grep -c '^FAIL' "$OUT/conformance_$dev.log" || true
fi
if [ "$what" = evidence ] || [ "$what" = all ]; then
  phase evidence
  python3 -m bench.conformance.sweep --device cuda --evidence > "$OUT/evidence_cuda.txt" 2>&1 || status=1
  cat "$OUT/evidence_cuda.txt"
fi
if [ "$what" = backward ] || [ "$what" = all ]; then
  phase backward
  python3 -m bench.gpu.backward_client --device cuda --markdown "$OUT/backward_client.md" ${BACKWARD_ARGS:-} \
    > "$OUT/backward_client.log" 2>&1 || status=1
  cat "$OUT/backward_client.md" 2>/dev/null || tail -20 "$OUT/backward_client.log"
fi
if [ "$what" = classify ]; then
  phase classify
  python3 evidence/gpu/classify_sdpa_math_backward.py ${CLASSIFY_ARGS:-} > "$OUT/classify_sdpa_math_backward.txt" \
    2> "$OUT/classify_sdpa_math_backward.log" || status=1
  head -16 "$OUT/classify_sdpa_math_backward.txt"; tail -3 "$OUT/classify_sdpa_math_backward.log"
fi
if [ "$what" = classify-efficient ]; then
  phase classify-efficient
  python3 evidence/gpu/classify_sdpa_efficient_backward.py ${CLASSIFY_ARGS:-} \
    > "$OUT/classify_sdpa_efficient_backward.txt" 2> "$OUT/classify_sdpa_efficient_backward.log" || status=1
  head -30 "$OUT/classify_sdpa_efficient_backward.txt"; tail -3 "$OUT/classify_sdpa_efficient_backward.log"
fi
if [ "$what" = lint ] || [ "$what" = all ]; then
  phase lint
  if [ -x "$GPUEMU_GPU_BUILD/bin/gpuemu_cpp_tests" ]; then
    "$GPUEMU_GPU_BUILD/bin/gpuemu_cpp_tests" --gtest_filter='Lint*' > "$OUT/lint_tests.log" 2>&1 || status=1
    grep -E "PASSED|FAILED|SKIPPED|tests ran" "$OUT/lint_tests.log" | tail -6
  fi
  if ! ls "$TRITON_CACHE_DIR"/*/*.cubin >/dev/null 2>&1; then  # the corpus did not run: compile some kernels
    python3 -m bench.gpu.corpus --json /dev/null --only "softmax (tutorial" "matmul (tl.dot" "flash attention fwd" \
      --iterations 3 >/dev/null 2>&1
  fi
  nvcc -arch=sm_90 -cubin -o /tmp/kernels_sm90.cubin tests/data/lint/kernels.cu 2>/dev/null
  python3 -m bench.gpu.lint_check "$GPUEMU_BIN_DIR/gpuemu" "$TRITON_CACHE_DIR" /tmp/kernels_sm90.cubin \
    --json "$OUT/lint.json" --markdown "$OUT/lint.md" > "$OUT/lint.log" 2>&1 || status=1
  tail -2 "$OUT/lint.md"
fi
if [ "$what" = oracle ] || [ "$what" = all ]; then
  # The fp64 oracle on the GPU: agreement with the CPU on every op (the C++ test fails where it
  # would skip), the race against the CPU oracle, and a daemon judging with it end to end.
  phase oracle
  if [ -x "$GPUEMU_GPU_BUILD/bin/gpuemu_cpp_tests" ]; then
    GPUEMU_REQUIRE_CUDA_ORACLE=1 "$GPUEMU_GPU_BUILD/bin/gpuemu_cpp_tests" --gtest_filter='GpuOracle*' \
      > "$OUT/oracle_tests.log" 2>&1 || status=1
    grep -E "^\||OK \]|PASSED|FAILED|SKIPPED" "$OUT/oracle_tests.log"
  else
    echo "run.sh: gpuemu_cpp_tests is not built (GPUEMU_GPU_TESTS=ON scripts/gpu/build.sh)"; status=1
  fi
  "$GPUEMU_GPU_BUILD/bin/bench_oracle_gpu" ${ORACLE_BENCH_ARGS:-} > "$OUT/oracle_bench.md" 2>&1 || status=1
  cat "$OUT/oracle_bench.md"
  # The same fuzz runs judged by a CPU-oracle daemon and by a CUDA-oracle one (every GEMM and
  # attention block on the GPU): the verdicts must be the same, case for case.
  for backend in cpu cuda; do
    h=/tmp/gpuemu-oracle-$backend
    GPUEMU_HOME=$h GPUEMU_ORACLE=$backend GPUEMU_ORACLE_CUDA_MIN_MACS=0 "$GPUEMU_BIN_DIR/gpuemu" daemon start || status=1
    GPUEMU_HOME=$h "$GPUEMU_BIN_DIR/gpuemu" daemon logs 2>/dev/null | grep -m1 I-oracle
    for run in "flash_attention flash_bn64_p_rounded" "flash_attention online_no_rescale" \
               "matmul fp32_tiled_k32" "matmul acc_overwrite" "conv2d direct_fp32" "conv2d pad_offset_missing" "bmm fp32_tiled_k32"; do
      set -- $run
      GPUEMU_HOME=$h "$GPUEMU_BIN_DIR/gpuemu" fuzz "$1" --kernel "$2" -n 40 --seed 7 --no-minimize --json \
        2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sys.argv[1], sys.argv[2], r.get("passed"), r.get("failed"), [f.get("case_index", f.get("index")) for f in r.get("failures", [])][:10])' "$1" "$2" \
        >> "$OUT/oracle_e2e_$backend.txt" || status=1
    done
    GPUEMU_HOME=$h "$GPUEMU_BIN_DIR/gpuemu" daemon stop >/dev/null 2>&1
  done
  cat "$OUT/oracle_e2e_cuda.txt"
  cmp "$OUT/oracle_e2e_cpu.txt" "$OUT/oracle_e2e_cuda.txt" && echo "oracle e2e: the same verdicts" || { echo "oracle e2e: verdicts differ"; status=1; }
fi
if [ "$what" = kernelbench ] || [ "$what" = all ]; then
  # KernelBench's format on CUDA: the Triton candidates of bench/kernelbench/gpu/candidates against
  # their problems (bench/kernelbench/problems), with the NaN sentinel filling the caching
  # allocator's free blocks and CUDA-graph replays among the hacks; each candidate's EXPECT checked
  phase kernelbench
  python3 -m gpuemu.kernelbench bench/kernelbench/problems bench/kernelbench/gpu/candidates --device cuda \
    --dtype float32 --dtype bfloat16 --cases "${KB_CASES:-50}" > "$OUT/kernelbench_cuda.jsonl" 2> "$OUT/kernelbench_cuda.log"
  python3 -m bench.kernelbench.expectations "$OUT/kernelbench_cuda.jsonl" bench/kernelbench/gpu/candidates \
    > "$OUT/kernelbench_cuda.md" || status=1
  cat "$OUT/kernelbench_cuda.md"; tail -3 "$OUT/kernelbench_cuda.log"
fi
"$GPUEMU_BIN_DIR/gpuemu" daemon stop >/dev/null 2>&1 || true
exit $status
