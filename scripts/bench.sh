#!/usr/bin/env bash
# Runs the benchmarks and prints each target's ratio against its peer measured in the same run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(mktemp)"
"$ROOT/build/bin/bench_reference" --benchmark_format=json --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true > "$OUT"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
med = {b["run_name"]: b for b in data["benchmarks"] if b.get("aggregate_name") == "median"}
def t(name): return med[name]["real_time"]
def bw(name): return med[name]["bytes_per_second"] / 1e9
print(f"{'benchmark':38} {'value':>12}  {'peer':>12}  ratio  goal")
for n in (1024, 2048):
    r, p = t(f"BM_matmul_reference/{n}/real_time"), t(f"BM_dgemm_raw/{n}/real_time")
    print(f"{'matmul reference ' + str(n) + '^3 (ms)':38} {r:12.1f}  {p:12.1f}  {p / r:5.2f}  >= 0.90")
m = bw("BM_memcpy/real_time")
for op in ("softmax", "layer_norm"):
    g = bw(f"BM_{op}_reference/real_time")
    print(f"{op + ' reference (GB/s)':38} {g:12.2f}  {m:12.2f}  {g / m:5.2f}  >= 0.30")
PY
