#!/usr/bin/env bash
# The libFuzzer targets (docs/reliability.md, "Fuzzing"), built with clang under AddressSanitizer
# and UndefinedBehaviorSanitizer (any report aborts the run), each seeded from tests/fuzz/corpus/:
#   fuzz_frame   the protocol decoder on arbitrary bytes (fuzz_frame.cpp)
#   fuzz_schema  op schemas          fuzz_ptx  PTX modules          fuzz_toml  gpuemu.toml
#
#   tests/fuzz/run.sh [SECONDS]                 every target for SECONDS each (default 15: make test)
#   tests/fuzz/run.sh --runs N [TARGET ...]     N executions of each target (the documented long run)
#
# Needs `make build` first (fuzz_toml links the engine, lint and base libraries from $BUILD_DIR) and
# clang with its runtime (scripts/install-deps.sh installs clang and libclang-rt-14-dev).
# Built with -DNDEBUG, as the product is (RelWithDebInfo): toml++ 3.3's debug assertion in
# parse_key fires on "[#" although its release build reports a clean parse error there, which is
# what gpuemu's users get (the first run of fuzz_toml found it; docs/reliability.md).
# Exits non-zero on a crash, a sanitizer report or a target that did not run; the input that
# failed is kept as $BUILD_DIR/fuzz/crash-TARGET-*.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD_DIR:-build}
OUT=$BUILD/fuzz
seconds=15 runs=
if [ "${1:-}" = --runs ]; then runs=$2; shift 2; elif [ $# -gt 0 ]; then seconds=$1; shift; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(frame schema ptx toml)

command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
for lib in "$BUILD/engine/libgpuemu_engine.a" "$BUILD/lint/libgpuemu_lint.a" "$BUILD/base/libgpuemu_base.a"; do
  [ -f "$lib" ] || { echo "fuzz: $lib is missing: run make build first" >&2; exit 1; }
done
mkdir -p "$OUT"
FLAGS=(-std=c++20 -O1 -g -DNDEBUG -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Ibase/include -Iengine/include -Iprotocol/include -Ilint/include -Iproject/include -Iengine -Icli -I.)
CORE=(engine/core/dtype.cpp base/error.cpp)

sources() {  # the instrumented sources of a target, then what it links uninstrumented
  case $1 in
    frame)  echo tests/fuzz/fuzz_frame.cpp protocol/frame.cpp engine/core/tensor.cpp "${CORE[@]}" ;;
    schema) echo -DFUZZ_SCHEMA tests/fuzz/fuzz_text.cpp engine/schema/schema_parser.cpp engine/schema/expr.cpp "${CORE[@]}" ;;
    ptx)    echo -DFUZZ_PTX tests/fuzz/fuzz_text.cpp lint/ptx_parser.cpp lint/ptx_statement.cpp \
                 lint/instruction_class.cpp base/error.cpp ;;
    toml)   echo -DFUZZ_TOML tests/fuzz/fuzz_text.cpp project/project_config.cpp project/project_keys.cpp \
                 "$BUILD/lint/libgpuemu_lint.a" "$BUILD/engine/libgpuemu_engine.a" "$BUILD/base/libgpuemu_base.a" \
                 $(pkg-config --cflags --libs tomlplusplus) -lopenblas -lpthread ;;
    *) echo "fuzz: unknown target '$1' (frame, schema, ptx, toml)" >&2; return 1 ;;
  esac
}

build() {  # rebuilt when a source, a header or a library is newer than the binary
  local t=$1 bin=$OUT/fuzz_$1
  local srcs; srcs=$(sources "$t")
  if [ -x "$bin" ] && [ -z "$(find $(for s in $srcs; do [ -f "$s" ] && echo "$s"; done) base engine protocol cli lint project \
         -name '*.hpp' -newer "$bin" -o -newer "$bin" -name '*.cpp' -o -newer "$bin" -name '*.a' 2>/dev/null | head -1)" ]; then
    return 0
  fi
  # shellcheck disable=SC2086
  clang++ "${FLAGS[@]}" $srcs -o "$bin.tmp" && mv "$bin.tmp" "$bin"
}

bounded_runs() {  # about 15 s each on a 2-core machine
  case $1 in frame) echo 150000 ;; schema) echo 80000 ;; ptx) echo 5000 ;; toml) echo 200000 ;; esac
}

pids=()
for t in "${targets[@]}"; do sources "$t" >/dev/null; build "$t" > "$OUT/build_$t.log" 2>&1 & pids+=($!); done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "fuzz: fuzz_${targets[$i]} did not build:" >&2; tail -20 "$OUT/build_${targets[$i]}.log" >&2; status=1; }
done
[ $status -eq 0 ] || exit 1

for t in "${targets[@]}"; do
  work=$OUT/corpus/$t
  mkdir -p "$OUT/corpus" "$work"
  # The bounded run (make test) is one fixed sequence: a fixed seed, a fixed number of inputs and a
  # fresh working corpus, so that CI fails for a change and not for the draw or the machine's
  # speed (SECONDS only caps it); the long run draws its own seed and keeps its corpus.
  if [ -z "$runs" ]; then
    work=$(mktemp -d "$OUT/corpus-$t-XXXXXX")
    limit=(-seed=1 -runs="$(bounded_runs "$t")" -max_total_time="$seconds")
  else
    limit=(-runs="$runs")
  fi
  log=$OUT/run_$t.log
  start=$(date +%s)
  if ! "$OUT/fuzz_$t" "${limit[@]}" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix="$OUT/crash-$t-" "$work" "tests/fuzz/corpus/$t" > "$log" 2>&1; then
    echo "fuzz_$t: FAILED (a crash, a sanitizer report or a timeout; input kept as $OUT/crash-$t-*)" >&2
    grep -E "ERROR|SUMMARY|runtime error|fuzz_frame:|==[0-9]+==" "$log" | head -20 >&2
    status=1
    continue
  fi
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [ -z "$n" ] || [ "$n" -eq 0 ]; then echo "fuzz_$t: did not run (see $log)" >&2; status=1; continue; fi
  echo "fuzz_$t: $n executions in $(( $(date +%s) - start )) s, 0 crashes, 0 sanitizer reports (corpus $(ls "$work" | wc -l) inputs)"
  [ -n "$runs" ] || rm -rf "$work"
done
exit $status
