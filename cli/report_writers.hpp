// The formats of `gpuemu ci` and `gpuemu report`: text, JSON, JUnit XML, SARIF 2.1.0, HTML.
//
// Every writer takes one report document (JSON):
//   {tool, version, kind: "ci" | "failures", generated_ms, project, config,
//    summary: {total, passed, failed, errors},
//    results: [{name, op, dtype, kernel, file?, line?, status: "passed" | "failed" | "error",
//               cases, failed_cases, seed, elapsed, error?,
//               failure?: {id, message, bug_class, summary, max_error, envelope, seed, index,
//                          repro, replay, error_map?}}],
//    runs: [{time_ms, project, preset, total, passed, failed, errors}],
//    pass_rates: [{op, dtype, runs, cases, passed, rate}]       (report_stats.hpp)
//    first_failures: [{id, op, kernel, total, first_failure, cases_to_first_failure}]}
// HTML draws each failure's error_map (error_map_svg.hpp), the pass rates and the first failures.
#pragma once

#include <gpuemu/base/xml_escape.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace gpuemu::cli {

std::string report_text(const nlohmann::json& doc);
std::string report_junit(const nlohmann::json& doc);
std::string report_sarif(const nlohmann::json& doc);
std::string report_html(const nlohmann::json& doc);
// By format name: text | json | junit | sarif | html; throws GpuemuException on another name.
std::string render_report(const nlohmann::json& doc, const std::string& format);

// Escapes text for XML and HTML content and attributes.
using gpuemu::xml_escape;  // gpuemu/base/xml_escape.hpp

}  // namespace gpuemu::cli
