// Rendering a lint run for people and tools: a text table, the JSON document of `--json`,
// SARIF 2.1.0 (code-scanning UIs, the editor), and JUnit XML (CI test reports).
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/lint/analyzer.hpp"
#include "gpuemu/lint/diff.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace gpuemu::lint {

enum class OutputFormat { text, json, sarif, junit };

// "text" | "json" | "sarif" | "junit"; anything else is invalid_argument.
Result<OutputFormat> parse_output_format(std::string_view name);

// {"kernels": [...], "toolkit", "notes", "verdict": "pass"|"warn"|"fail", "findings", "diff"}.
nlohmann::json report_to_json(const LintReport& report, const LintVerdict& verdict);
std::string render_text(const LintReport& report, const LintVerdict& verdict);
nlohmann::json render_sarif(const LintReport& report, const LintVerdict& verdict);
std::string render_junit(const LintReport& report, const LintVerdict& verdict);

// The document for `format`, ending with a newline.
std::string render(const LintReport& report, const LintVerdict& verdict, OutputFormat format);

}  // namespace gpuemu::lint
