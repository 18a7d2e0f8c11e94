#!/usr/bin/env bash
# Runs the benchmarks and prints each target's ratio against its peer measured in the same run
# (docs/performance.md records the figures). Repetitions are randomly interleaved across
# benchmarks, so a change of load on a shared machine hits target and peer alike. Each ratio is
# "how fast the target runs relative to its peer" (1.0 = as fast), from the medians and from the
# fastest repetitions (interference only adds time); cv is the spread (stddev / mean).
# Usage: scripts/bench.sh [REPETITIONS (default 5)] [extra benchmark flags...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REPS="${1:-5}"
shift || true
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  ($(nproc) cores)"
"$ROOT/build/bin/bench_reference" --benchmark_format=json --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true "$@" > "$OUT"
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
agg = {}
for b in data["benchmarks"]:
    agg.setdefault(b["run_name"].rsplit("/real_time", 1)[0], {})[b["aggregate_name"]] = b["real_time"]
ELEMS = 4096 * 4096
def gbs(ms): return ELEMS * 16 / (ms / 1e3) / 1e9  # fp64 in + fp64 out
def cv(name): return 100 * agg[name]["stddev"] / agg[name]["mean"]
rows = []  # target, unit, target median/min, peer, peer median/min, ratio median/min, goal, cv
for n in (1024, 2048):
    peer = f"BM_dgemm_raw/{n}"
    for name, label, goal in ((f"BM_matmul_reference/{n}", "value path", ">= 0.90"),
                              (f"BM_matmul_reference_full/{n}", "full (+ |a|@|b|)", "-")):
        t, p = agg[name], agg[peer]
        rows.append((f"matmul {n}^3, {label}", "ms", t["median"], t["min"], f"cblas_dgemm {n}^3",
                     p["median"], p["min"], p["median"] / t["median"], p["min"] / t["min"], goal, cv(name), cv(peer)))
for op in ("softmax", "layer_norm"):
    name = f"BM_{op}_reference"
    t = agg[name]
    for th in (1, 2):
        peer = f"BM_memcpy/{th}"
        p = agg[peer]
        rows.append((f"{op} 4096x4096", "GB/s", gbs(t["median"]), gbs(t["min"]), f"memcpy, {th} thread{'s' * (th > 1)}",
                     gbs(p["median"]), gbs(p["min"]), p["median"] / t["median"], p["min"] / t["min"], ">= 0.30",
                     cv(name), cv(peer)))
print("| target | unit | median | best | peer | median | best | ratio (median) | ratio (best) | goal | cv target | cv peer |")
print("|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|")
for (name, unit, tm, tb, peer, pm, pb, rm, rb, goal, c1, c2) in rows:
    print(f"| {name} | {unit} | {tm:.2f} | {tb:.2f} | {peer} | {pm:.2f} | {pb:.2f} | {rm:.2f} | {rb:.2f} | {goal} "
          f"| {c1:.0f}% | {c2:.0f}% |")
PY
