#!/usr/bin/env bash
# The daemon's transport and validation throughput against peers measured in the same run
# (bench/bench_protocol.cpp). Prints a markdown table of ratios (target speed / peer speed; 1.0 =
# as fast) for docs/performance.md.
# Usage: scripts/bench_protocol.sh [REPETITIONS (default 3)] [extra benchmark flags...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${GPUEMU_BENCH_BIN:-$ROOT/build/bin/bench_protocol}"
REPS="${1:-3}"
shift || true
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  ($(nproc) cores)"
"$BIN" --benchmark_format=json --benchmark_repetitions="$REPS" --benchmark_min_time=0.3 \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true "$@" > "$OUT"
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
med = {}
for b in data["benchmarks"]:
    if b["aggregate_name"] == "median":
        med[b["run_name"].rsplit("/real_time", 1)[0]] = b
def t(name): return med[name]["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[med[name]["time_unit"]]
rows = [("daemon ping round trip", "BM_daemon_ping", "raw NNG req/rep echo, 64 B", "BM_raw_nng_roundtrip", "us")]
for n, label in ((65536, "64 KiB"), (8388608, "8 MiB")):
    rows.append((f"daemon, one {label} tensor", f"BM_daemon_tensor/{n}", f"raw NNG echo, {label}", f"BM_raw_nng_bytes/{n}", "GB/s"))
    rows.append((f"daemon, one {label} tensor", f"BM_daemon_tensor/{n}", f"memcpy {label}", f"BM_memcpy/{n}", "GB/s"))
ops = ["softmax", "matmul", "flash_attention"]
for i, op in enumerate(ops):
    for size, label in ((0, "small"), (1, "large")):
        rows.append((f"validate {op} {label} (cases/s)", f"BM_validate/{i}/{size}", "judge in process",
                     f"BM_judge_in_process/{i}/{size}", "cases/s"))
print("| target | value | peer | value | ratio |")
print("|---|---:|---|---:|---:|")
for name, tb, peer, pb, unit in rows:
    if tb not in med or pb not in med:
        continue
    def val(b):
        if unit == "us": return t(b) * 1e6
        if unit == "GB/s": return med[b]["bytes_per_second"] / 1e9
        return med[b]["items_per_second"]
    tv, pv = val(tb), val(pb)
    ratio = pv / tv if unit == "us" else tv / pv
    print(f"| {name} | {tv:.3g} {unit} | {peer} | {pv:.3g} {unit} | {ratio:.2f} |")
PY
