#!/usr/bin/env bash
# Runs the benchmarks and prints each target's ratio against its peer measured in the same run
# (docs/performance.md records the figures). Repetitions are randomly interleaved across
# benchmarks, so a change of load on a shared machine hits target and peer alike. Each ratio is
# "how fast the target runs relative to its peer" (1.0 = as fast), from the medians and from the
# fastest repetitions (interference only adds time); cv is the spread (stddev / mean). For the
# softmax / layer_norm rows it is the ratio of GB/s, each side counting the bytes it moves (the
# reference: its input and every output vector; memcpy: 16 bytes per element).
# Usage: scripts/bench.sh [REPETITIONS (default 5)] [extra benchmark flags...]
#   e.g. scripts/bench.sh 7 --benchmark_filter='memcpy|fresh|softmax|layer_norm'
# GPUEMU_BENCH_BIN overrides the binary (default build/bin/bench_reference).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REPS="${1:-5}"
shift || true
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  ($(nproc) cores)"
"${GPUEMU_BENCH_BIN:-$ROOT/build/bin/bench_reference}" --benchmark_format=json --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true "$@" > "$OUT"
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
agg, bytes_per_element = {}, {}
for b in data["benchmarks"]:
    run = b["run_name"].rsplit("/real_time", 1)[0]
    agg.setdefault(run, {})[b["aggregate_name"]] = b["real_time"]
    if "bytes_per_element" in b: bytes_per_element[run] = b["bytes_per_element"]
ELEMS = 4096 * 4096
def bpe(name): return bytes_per_element.get(name, 16)  # bytes moved per element
def gbs(ms, b=16): return ELEMS * b / (ms / 1e3) / 1e9
def cv(name): return 100 * agg[name]["stddev"] / agg[name]["mean"]
rows = []  # target, unit, target median/min, peer, peer median/min, ratio median/min, goal, cv
for n in (1024, 2048):
    peer = f"BM_dgemm_raw/{n}"
    for name, label, goal in ((f"BM_matmul_reference/{n}", "value path", ">= 0.90"),
                              (f"BM_matmul_reference_full/{n}", "full (+ |a|@|b|)", "-")):
        if name not in agg or peer not in agg: continue
        t, p = agg[name], agg[peer]
        rows.append((f"matmul {n}^3, {label}", "ms", t["median"], t["min"], f"cblas_dgemm {n}^3",
                     p["median"], p["min"], p["median"] / t["median"], p["min"] / t["min"], goal, cv(name), cv(peer)))
# GB/s of what each side moves: the reference its input read and every output vector written
# (bytes_per_element, from the benchmark), memcpy 16 bytes per element (read + write).
# BM_<op>_reference: outputs in blocks the previous call freed (as a fuzz run); _cold: fresh
# mappings every call (the first call at a size).
for op, variant, label in (("softmax", "", ""), ("softmax", "_cold", ", cold"),
                           ("layer_norm", "", ""), ("layer_norm", "_cold", ", cold")):
    name = f"BM_{op}_reference{variant}"
    if name not in agg: continue
    t, b = agg[name], bpe(name)
    for th in (1, 2):
        peer = f"BM_memcpy/{th}"
        if peer not in agg: continue
        p = agg[peer]
        rows.append((f"{op} 4096x4096{label} ({b:.0f} B/elt)", "GB/s", gbs(t["median"], b), gbs(t["min"], b),
                     f"memcpy, {th} thread{'s' * (th > 1)}", gbs(p["median"]), gbs(p["min"]),
                     gbs(t["median"], b) / gbs(p["median"]), gbs(t["min"], b) / gbs(p["min"]), ">= 0.30",
                     cv(name), cv(peer)))
print("| target | unit | median | best | peer | median | best | ratio (median) | ratio (best) | goal | cv target | cv peer |")
print("|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|")
for (name, unit, tm, tb, peer, pm, pb, rm, rb, goal, c1, c2) in rows:
    print(f"| {name} | {unit} | {tm:.2f} | {tb:.2f} | {peer} | {pm:.2f} | {pb:.2f} | {rm:.2f} | {rb:.2f} | {goal} "
          f"| {c1:.0f}% | {c2:.0f}% |")
# BM_fresh_outputs/K/MODE: K fresh 4096x4096 outputs zeroed by output_buffer (0), from
# uninit_output (1: pages faulted in by every core, nothing written), the same written once on
# every core (2); an older binary has BM_fresh_outputs/K, zeroed.
MODES = ((0, "zeroed (output_buffer)"), (1, "uninit_output alone"),
         (2, "uninit_output written once on every core"))
for op, k in (("softmax", 2), ("layer_norm", 3)):
    ref = f"BM_{op}_reference_cold"
    if ref not in agg: ref = f"BM_{op}_reference"
    if ref not in agg: continue
    parts = []
    for mode, what in MODES:
        name = f"BM_fresh_outputs/{k}/{mode}"
        if name not in agg and mode == 0: name = f"BM_fresh_outputs/{k}"
        if name in agg:
            parts.append(f"{what} {agg[name]['median']:.1f} ms (fastest {agg[name]['min']:.1f})")
    print(f"{ref}: median {agg[ref]['median']:.1f} ms (fastest {agg[ref]['min']:.1f}); "
          f"its {k} fresh outputs alone: " + "; ".join(parts))
PY
