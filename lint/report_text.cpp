// The human-readable table of `gpuemu lint`.
#include "gpuemu/lint/report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace gpuemu::lint {
namespace {

std::string cell(const std::optional<std::int64_t>& v) {
  return v ? std::to_string(*v) : "-";
}

std::string pad(std::string s, std::size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string location_text(const Finding& f) {
  if (f.location) return f.location->file + ":" + std::to_string(f.location->line);
  return f.input;
}

void kernel_table(std::ostringstream& out, const LintReport& report) {
  std::size_t name_width = 6;
  for (const KernelMetrics& k : report.kernels)
    name_width = std::max(name_width, std::min<std::size_t>(k.demangled.size(), 60));
  out << pad("KERNEL", name_width, false) << "  " << pad("ARCH", 7, false)
      << "  REGS  SPILL ST/LD  STACK  SHARED  BAR   SASS    PTX\n";
  for (const KernelMetrics& k : report.kernels) {
    std::string name = k.demangled.size() > 60 ? k.demangled.substr(0, 57) + "..." : k.demangled;
    if (!k.variant.empty()) name += " [" + k.variant + "]";
    out << pad(name, name_width, false) << "  " << pad(k.arch, 7, false)
        << pad(cell(k.registers), 6, true)
        << pad(cell(k.spill_store_bytes) + "/" + cell(k.spill_load_bytes), 13, true)
        << pad(cell(k.stack_bytes), 7, true) << pad(cell(k.shared_bytes), 8, true)
        << pad(cell(k.barriers), 5, true) << pad(cell(k.instructions), 7, true)
        << pad(cell(k.ptx_instructions), 7, true) << "\n";
  }
}

void diff_table(std::ostringstream& out, const LintVerdict& verdict) {
  int unchanged = 0;
  for (const KernelDiff& d : verdict.diffs) {
    if (d.status == KernelStatus::unchanged) {
      ++unchanged;
      continue;
    }
    out << "  " << kernel_status_name(d.status) << "  " << d.key << "\n";
    for (const MetricDelta& m : d.deltas) {
      if (!m.before || !m.after || *m.before == *m.after || m.metric.rfind("mix.", 0) == 0)
        continue;
      char pct[32] = "";
      if (m.percent) std::snprintf(pct, sizeof pct, " (%+.1f%%)", *m.percent);
      out << "      " << pad(m.metric, 18, false) << pad(std::to_string(*m.before), 8, true)
          << " -> " << pad(std::to_string(*m.after), 8, true) << pct << "\n";
    }
  }
  out << "  " << unchanged << " kernel(s) unchanged\n";
}

}  // namespace

std::string render_text(const LintReport& report, const LintVerdict& verdict) {
  std::ostringstream out;
  if (report.kernels.empty())
    out << "no kernels found\n";
  else
    kernel_table(out, report);
  if (verdict.has_baseline) {
    out << "\nagainst the baseline:\n";
    diff_table(out, verdict);
  }
  if (!verdict.findings.empty()) out << "\n";
  std::map<std::string, std::string> shown;  // symbol -> demangled name
  for (const KernelMetrics& k : report.kernels) shown[k.name] = k.demangled;
  for (const Finding& f : verdict.findings) {
    out << pad(std::string(severity_name(f.severity)), 8, false) << pad(f.rule, 19, false);
    auto name = shown.find(f.kernel);
    if (!f.kernel.empty())
      out << (name == shown.end() ? f.kernel : name->second) << " (" << f.arch << "): ";
    out << f.message;
    std::string where = location_text(f);
    if (!where.empty()) out << "  [" << where << "]";
    out << "\n";
  }
  for (const std::string& note : report.notes) out << "note: " << note << "\n";
  int errors = verdict.count(Severity::error), warnings = verdict.count(Severity::warning);
  out << "\n"
      << (errors > 0     ? "FAIL"
          : warnings > 0 ? "PASS with warnings"
                         : "PASS")
      << ": " << report.kernels.size() << " kernel(s), " << errors << " error(s), " << warnings
      << " warning(s)\n";
  return out.str();
}

}  // namespace gpuemu::lint
