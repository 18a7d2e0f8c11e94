// The `--json` document, and the format dispatcher.
#include "gpuemu/lint/report.hpp"

namespace gpuemu::lint {

using nlohmann::json;

namespace {

json finding_json(const Finding& f) {
  return json{{"severity", std::string(severity_name(f.severity))},
              {"rule", f.rule},
              {"kernel", f.kernel},
              {"arch", f.arch},
              {"input", f.input},
              {"message", f.message},
              {"location", f.location ? json(*f.location) : json(nullptr)}};
}

json optional_json(const std::optional<std::int64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

json diff_json(const KernelDiff& d) {
  json deltas = json::array();
  for (const MetricDelta& m : d.deltas)
    deltas.push_back(json{{"metric", m.metric},
                          {"before", optional_json(m.before)},
                          {"after", optional_json(m.after)},
                          {"percent", m.percent ? json(*m.percent) : json(nullptr)}});
  return json{{"key", d.key},
              {"name", d.name},
              {"arch", d.arch},
              {"status", std::string(kernel_status_name(d.status))},
              {"deltas", deltas}};
}

}  // namespace

Result<OutputFormat> parse_output_format(std::string_view name) {
  if (name == "text") return OutputFormat::text;
  if (name == "json") return OutputFormat::json;
  if (name == "sarif") return OutputFormat::sarif;
  if (name == "junit") return OutputFormat::junit;
  return make_error(ErrorCode::invalid_argument, "unknown format '" + std::string(name) +
                                                     "' (expected text, json, sarif or junit)");
}

json report_to_json(const LintReport& report, const LintVerdict& verdict) {
  json findings = json::array();
  for (const Finding& f : verdict.findings) findings.push_back(finding_json(f));
  json diffs = nullptr;
  if (verdict.has_baseline) {
    diffs = json::array();
    for (const KernelDiff& d : verdict.diffs) diffs.push_back(diff_json(d));
  }
  const char* outcome = verdict.failed()                       ? "fail"
                        : verdict.count(Severity::warning) > 0 ? "warn"
                                                               : "pass";
  return json{{"format", k_report_format}, {"version", k_baseline_version},
              {"toolkit", report.toolkit}, {"kernels", report.kernels},
              {"notes", report.notes},     {"verdict", outcome},
              {"findings", findings},      {"diff", diffs}};
}

std::string render(const LintReport& report, const LintVerdict& verdict, OutputFormat format) {
  switch (format) {
    case OutputFormat::json:
      return report_to_json(report, verdict).dump(2) + "\n";
    case OutputFormat::sarif:
      return render_sarif(report, verdict).dump(2) + "\n";
    case OutputFormat::junit:
      return render_junit(report, verdict);
    case OutputFormat::text:
      break;
  }
  return render_text(report, verdict);
}

}  // namespace gpuemu::lint
