// Per-kernel deltas against a baseline, judged by the policy's thresholds.
#include "gpuemu/lint/diff.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace gpuemu::lint {
namespace {

using OptInt = std::optional<std::int64_t>;

// Metrics whose growth is judged against warn/fail_delta_percent.
constexpr const char* k_judged[] = {"instructions", "registers", "shared_bytes", "stack_bytes"};

std::vector<std::pair<const char*, OptInt>> compared_metrics(const KernelMetrics& k) {
  return {{"instructions", k.instructions},
          {"registers", k.registers},
          {"spill_store_bytes", k.spill_store_bytes},
          {"spill_load_bytes", k.spill_load_bytes},
          {"shared_bytes", k.shared_bytes},
          {"stack_bytes", k.stack_bytes},
          {"barriers", k.barriers},
          {"ptx_instructions", k.ptx_instructions}};
}

MetricDelta make_delta(std::string metric, OptInt before, OptInt after) {
  MetricDelta d{std::move(metric), before, after, std::nullopt};
  if (before && after && *before != 0)
    d.percent = 100.0 * static_cast<double>(*after - *before) / static_cast<double>(*before);
  return d;
}

bool changed(const MetricDelta& d) {
  return d.before && d.after && *d.before != *d.after;
}

std::string format_percent(double p) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", p);
  return buffer;
}

std::string describe(const MetricDelta& d) {
  std::string text = d.metric + " " + std::to_string(*d.before) + " -> " + std::to_string(*d.after);
  return d.percent ? text + " (" + format_percent(*d.percent) + ")" : text;
}

Finding finding(Severity s, std::string rule, const KernelMetrics& k, std::string message) {
  return Finding{s, std::move(rule), k.name, k.arch, k.input, std::move(message), k.location};
}

void judge(const KernelMetrics& k, const std::vector<MetricDelta>& deltas, const LintPolicy& policy,
           std::vector<Finding>& out) {
  std::string improved;
  for (const MetricDelta& d : deltas) {
    if (!changed(d)) continue;
    bool judged = false;
    for (const char* m : k_judged) judged |= d.metric == m;
    bool spill = d.metric.rfind("spill_", 0) == 0;
    double growth = d.percent ? *d.percent : std::numeric_limits<double>::infinity();
    if (*d.after < *d.before) {
      if (judged && -growth > policy.warn_delta_percent)
        improved += (improved.empty() ? "" : ", ") + describe(d);
    } else if (judged && growth > policy.fail_delta_percent) {
      out.push_back(finding(Severity::error, "delta-" + d.metric.substr(0, d.metric.find('_')), k,
                            describe(d) + " exceeds fail_delta_percent " +
                                format_percent(policy.fail_delta_percent)));
    } else if (judged && growth > policy.warn_delta_percent) {
      out.push_back(finding(Severity::warning, "delta-" + d.metric.substr(0, d.metric.find('_')), k,
                            describe(d) + " exceeds warn_delta_percent " +
                                format_percent(policy.warn_delta_percent)));
    } else if (spill && policy.allow_spills) {
      // With spills disallowed, check_limits already fails the kernel.
      out.push_back(finding(Severity::warning, "delta-spills", k, describe(d)));
    }
  }
  if (!improved.empty()) out.push_back(finding(Severity::note, "improved", k, improved));
}

// A note listing the instruction classes whose PTX counts moved ("ld_global 2 -> 3").
void mix_note(const KernelMetrics& before, const KernelMetrics& after, std::vector<Finding>& out,
              std::vector<MetricDelta>& deltas) {
  if (!before.mix || !after.mix) return;
  std::string moved;
  for (int i = 0; i < k_instruction_class_count; ++i) {
    auto cls = static_cast<InstructionClass>(i);
    MetricDelta d = make_delta("mix." + std::string(instruction_class_name(cls)),
                               before.mix->count(cls), after.mix->count(cls));
    if (changed(d))
      moved += (moved.empty() ? "" : ", ") + std::string(instruction_class_name(cls)) + " " +
               std::to_string(*d.before) + " -> " + std::to_string(*d.after);
    deltas.push_back(std::move(d));
  }
  if (!moved.empty())
    out.push_back(finding(Severity::note, "mix-changed", after, "PTX mix: " + moved));
}

}  // namespace

std::string_view severity_name(Severity severity) {
  switch (severity) {
    case Severity::note:
      return "note";
    case Severity::warning:
      return "warning";
    case Severity::error:
      return "error";
  }
  return "error";
}

std::string_view kernel_status_name(KernelStatus status) {
  switch (status) {
    case KernelStatus::unchanged:
      return "unchanged";
    case KernelStatus::changed:
      return "changed";
    case KernelStatus::added:
      return "added";
    case KernelStatus::removed:
      return "removed";
  }
  return "changed";
}

bool LintVerdict::failed() const {
  return count(Severity::error) > 0;
}

int LintVerdict::count(Severity severity) const {
  int n = 0;
  for (const Finding& f : findings) n += f.severity == severity;
  return n;
}

LintVerdict diff(const Baseline& baseline, const std::vector<KernelMetrics>& current,
                 const LintPolicy& policy) {
  LintVerdict verdict;
  verdict.has_baseline = true;
  std::map<std::string, const KernelMetrics*> before;
  for (const KernelMetrics& k : baseline.kernels) before[k.key()] = &k;
  for (const KernelMetrics& k : current) {
    KernelDiff d{k.key(), k.name, k.arch, KernelStatus::added, {}};
    auto it = before.find(k.key());
    if (it == before.end()) {
      verdict.findings.push_back(finding(Severity::note, "new-kernel", k, "not in the baseline"));
      verdict.diffs.push_back(std::move(d));
      continue;
    }
    const KernelMetrics& old = *it->second;
    before.erase(it);
    auto old_metrics = compared_metrics(old), new_metrics = compared_metrics(k);
    for (std::size_t i = 0; i < new_metrics.size(); ++i)
      d.deltas.push_back(
          make_delta(new_metrics[i].first, old_metrics[i].second, new_metrics[i].second));
    judge(k, d.deltas, policy, verdict.findings);
    mix_note(old, k, verdict.findings, d.deltas);
    bool any = false;
    for (const MetricDelta& m : d.deltas) any |= changed(m);
    d.status = any ? KernelStatus::changed : KernelStatus::unchanged;
    verdict.diffs.push_back(std::move(d));
  }
  for (const auto& [key, old] : before) {
    verdict.diffs.push_back(KernelDiff{key, old->name, old->arch, KernelStatus::removed, {}});
    if (policy.missing_kernel == MissingKernelAction::ignore) continue;
    Severity s =
        policy.missing_kernel == MissingKernelAction::fail ? Severity::error : Severity::warning;
    verdict.findings.push_back(
        finding(s, "missing-kernel", *old, "in the baseline but not found now"));
  }
  return verdict;
}

LintVerdict evaluate(const LintReport& report, const Baseline* baseline, const LintPolicy& policy) {
  LintVerdict verdict;
  if (baseline != nullptr) {
    verdict = diff(*baseline, report.kernels, policy);
    if (!baseline->toolkit.empty() && !report.toolkit.empty() &&
        baseline->toolkit != report.toolkit)
      verdict.findings.push_back(Finding{Severity::note, "toolkit-changed", "", "", "",
                                         "baseline made with CUDA " + baseline->toolkit + ", now " +
                                             report.toolkit + ": deltas may come from the compiler",
                                         std::nullopt});
  }
  std::vector<Finding> limits = check_limits(report.kernels, policy);
  verdict.findings.insert(verdict.findings.begin(), limits.begin(), limits.end());
  return verdict;
}

}  // namespace gpuemu::lint
