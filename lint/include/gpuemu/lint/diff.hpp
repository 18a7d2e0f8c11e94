// Judging metrics: absolute limits of the policy on the current kernels, and per-kernel deltas
// against a baseline (Δregisters, Δspills, Δinstructions %, Δshared, Δstack). A finding of
// severity `error` is a regression: the command exits 1.
#pragma once

#include "gpuemu/lint/analyzer.hpp"
#include "gpuemu/lint/baseline.hpp"
#include "gpuemu/lint/metrics.hpp"
#include "gpuemu/lint/policy.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuemu::lint {

enum class Severity { note, warning, error };
std::string_view severity_name(Severity severity);  // "note" | "warning" | "error"

// One judgement. `rule` is a stable id: max-registers, max-shared, max-stack, spills,
// forbidden-class, delta-instructions, delta-registers, delta-shared, delta-stack, delta-spills,
// missing-kernel, new-kernel, improved, mix-changed, toolkit-changed.
struct Finding {
  Severity severity = Severity::note;
  std::string rule;
  std::string kernel;  // KernelMetrics::name ("" for run-wide findings)
  std::string arch;
  std::string input;
  std::string message;
  std::optional<SourceLocation> location;
};

struct MetricDelta {
  std::string metric;  // "instructions", "registers", "spill_store_bytes", ...
  std::optional<std::int64_t> before;
  std::optional<std::int64_t> after;
  std::optional<double>
      percent;  // (after - before) / before * 100; absent when before is 0/unknown
};

enum class KernelStatus { unchanged, changed, added, removed };
std::string_view kernel_status_name(KernelStatus status);

struct KernelDiff {
  std::string key;
  std::string name;
  std::string arch;
  KernelStatus status = KernelStatus::unchanged;
  std::vector<MetricDelta> deltas;  // every compared metric, changed or not
};

struct LintVerdict {
  bool has_baseline = false;
  std::vector<KernelDiff> diffs;
  std::vector<Finding> findings;

  bool failed() const;  // any error finding
  int count(Severity severity) const;
};

// Absolute limits (max_registers, spills, forbidden classes, ...) on the current kernels.
std::vector<Finding> check_limits(const std::vector<KernelMetrics>& current,
                                  const LintPolicy& policy);
// Per-kernel deltas against the baseline, judged by the policy's thresholds.
LintVerdict diff(const Baseline& baseline, const std::vector<KernelMetrics>& current,
                 const LintPolicy& policy);
// check_limits, plus diff when a baseline is given.
LintVerdict evaluate(const LintReport& report, const Baseline* baseline, const LintPolicy& policy);

}  // namespace gpuemu::lint
