// Report formats (report_writers.hpp).
#include "report_writers.hpp"

#include "error_map_svg.hpp"

#include <gpuemu/base/error.hpp>

#include <algorithm>
#include <ctime>
#include <iomanip>
#include <set>
#include <sstream>

namespace gpuemu::cli {
namespace {

using Json = nlohmann::json;

std::string str(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string num(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "-";
  std::ostringstream os;
  os << std::setprecision(4) << it->get<double>();
  return os.str();
}

std::string iso_time(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  return os.str();
}

// After a daemon run's "passed/total": a Python client's backward=True run counts a case failed
// when its output or a gradient failed (cli/report_stats.hpp, join_backward_parts), so its parts'
// own counts follow; the gradients' run names the forward run it is part of.
std::string backward_parts(const Json& run) {
  std::ostringstream os;
  if (run.contains("forward") && run.contains("gradients")) {
    const Json& f = run["forward"];
    const Json& g = run["gradients"];
    os << " (forward " << str(f, "passed") << "/" << str(f, "total") << ", gradients "
       << str(g, "op") << " " << str(g, "passed") << "/" << str(g, "total") << "; backward run "
       << str(g, "run") << ")";
  } else if (run.contains("part_of") && run["part_of"].is_object() &&
             run["part_of"].value("part", "") == "gradients") {
    os << " (the gradients of " << str(run["part_of"], "op") << "'s backward run "
       << str(run["part_of"], "run") << ")";
  }
  return os.str();
}

// The lines a human needs about one failing result.
std::string failure_detail(const Json& r) {
  std::ostringstream os;
  if (r.contains("error")) os << "error: " << str(r, "error") << "\n";
  if (!r.contains("failure")) return os.str();
  const Json& f = r["failure"];
  os << "message:   " << str(f, "message") << "\n"
     << "seed:      " << str(r, "seed") << " (case " << str(f, "index") << ", case seed "
     << str(f, "seed") << ")\n"
     << "max error: " << num(f, "max_error") << " (envelope " << num(f, "envelope") << ")\n"
     << "diagnosis: " << str(f, "bug_class") << ": " << str(f, "summary") << "\n"
     << "repro:     " << str(f, "repro") << "\n";
  if (!str(f, "replay").empty()) os << "replay:    " << str(f, "replay") << "\n";
  return os.str();
}

std::string headline(const Json& r) {
  if (r.contains("failure")) return str(r["failure"], "message");
  return str(r, "error");
}

}  // namespace

std::string report_text(const Json& doc) {
  std::ostringstream os;
  const Json s = doc.value("summary", Json::object());
  os << "gpuemu " << doc.value("kind", "") << " report";
  if (!str(doc, "project").empty()) os << "  project " << str(doc, "project");
  os << "  " << iso_time(doc.value("generated_ms", std::int64_t{0})) << "\n";
  // Columns at least as wide as their widest cell, a space between them.
  std::size_t w_name = 4, w_kernel = 6;
  for (const auto& r : doc.value("results", Json::array())) {
    w_name = std::max(w_name, str(r, "name").size());
    w_kernel = std::max(w_kernel, str(r, "kernel").size());
  }
  const int wn = static_cast<int>(w_name + 2), wk = static_cast<int>(w_kernel + 2);
  os << std::left << std::setw(wn) << "TEST" << std::setw(wk) << "KERNEL" << std::setw(8)
     << "STATUS" << std::setw(14) << "FAILED/CASES" << std::setw(12) << "MAX ERROR"
     << "CLASS\n";
  for (const auto& r : doc.value("results", Json::array())) {
    const Json f = r.value("failure", Json::object());
    std::string cases = r.contains("cases") ? str(r, "failed_cases") + "/" + str(r, "cases") : "-";
    os << std::setw(wn) << str(r, "name") << std::setw(wk) << str(r, "kernel") << std::setw(8)
       << str(r, "status") << std::setw(14) << cases << std::setw(12) << num(f, "max_error")
       << str(f, "bug_class") << "\n";
  }
  for (const auto& r : doc.value("results", Json::array())) {
    if (r.value("status", "") == "passed") continue;
    os << "\n" << str(r, "name") << " (" << str(r, "kernel") << ")\n";
    std::istringstream lines(failure_detail(r));
    for (std::string line; std::getline(lines, line);) os << "  " << line << "\n";
  }
  const Json runs = doc.value("runs", Json::array());
  if (!runs.empty()) {
    os << "\nrecent ci runs:\n";
    for (const auto& run : runs)
      os << "  " << iso_time(run.value("time_ms", std::int64_t{0})) << "  " << str(run, "project")
         << "  preset " << str(run, "preset") << "  " << str(run, "passed") << "/"
         << str(run, "total") << " passed, " << str(run, "failed") << " failed, "
         << str(run, "errors") << " errors\n";
  }
  const Json druns = doc.value("daemon_runs", Json::array());
  if (!druns.empty()) {
    os << "\ndaemon runs (store):\n";
    for (const auto& run : druns)
      os << "  " << iso_time(run.value("time_ms", std::int64_t{0})) << "  " << str(run, "id")
         << "  " << str(run, "kind") << "  " << str(run, "op") << "  " << str(run, "kernel")
         << "  " << str(run, "passed") << "/" << str(run, "total") << " passed"
         << backward_parts(run) << "\n";
  }
  os << "\n"
     << s.value("total", 0) << " tests: " << s.value("passed", 0) << " passed, "
     << s.value("failed", 0) << " failed, " << s.value("errors", 0) << " errors\n";
  return os.str();
}

std::string report_junit(const Json& doc) {
  const Json s = doc.value("summary", Json::object());
  double elapsed = 0;
  for (const auto& r : doc.value("results", Json::array())) elapsed += r.value("elapsed", 0.0);
  std::ostringstream os;
  const std::string suite = "gpuemu " + doc.value("kind", std::string("ci")) +
                            (str(doc, "project").empty() ? "" : " " + str(doc, "project"));
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<testsuites name=\"gpuemu\" tests=\"" << s.value("total", 0) << "\" failures=\""
     << s.value("failed", 0) << "\" errors=\"" << s.value("errors", 0) << "\" time=\"" << elapsed
     << "\">\n"
     << "  <testsuite name=\"" << xml_escape(suite) << "\" tests=\"" << s.value("total", 0)
     << "\" failures=\"" << s.value("failed", 0) << "\" errors=\"" << s.value("errors", 0)
     << "\" time=\"" << elapsed << "\" timestamp=\""
     << iso_time(doc.value("generated_ms", std::int64_t{0})) << "\">\n";
  for (const auto& r : doc.value("results", Json::array())) {
    os << "    <testcase classname=\"" << xml_escape("gpuemu." + str(r, "op")) << "\" name=\""
       << xml_escape(str(r, "name") + " " + str(r, "kernel")) << "\" time=\""
       << r.value("elapsed", 0.0) << "\"";
    if (!str(r, "file").empty())
      os << " file=\"" << xml_escape(str(r, "file")) << "\" line=\"" << r.value("line", 1) << "\"";
    const std::string status = r.value("status", "");
    if (status == "passed") {
      os << "/>\n";
      continue;
    }
    os << ">\n";
    const char* tag = status == "error" ? "error" : "failure";
    const std::string type =
        r.contains("failure") ? str(r["failure"], "bug_class") : std::string("setup_error");
    os << "      <" << tag << " message=\"" << xml_escape(headline(r)) << "\" type=\""
       << xml_escape(type) << "\">" << xml_escape(failure_detail(r)) << "</" << tag << ">\n";
    os << "      <properties><property name=\"seed\" value=\"" << xml_escape(str(r, "seed"))
       << "\"/></properties>\n";
    os << "    </testcase>\n";
  }
  os << "  </testsuite>\n</testsuites>\n";
  return os.str();
}

std::string report_sarif(const Json& doc) {
  Json results = Json::array();
  Json rules = Json::array();
  std::set<std::string> rule_ids;
  // Files under the project's root are given relative to SRCROOT, as code scanning expects.
  const std::string srcroot = str(doc, "srcroot");
  for (const auto& r : doc.value("results", Json::array())) {
    const std::string status = r.value("status", "");
    if (status == "passed") continue;
    const Json f = r.value("failure", Json::object());
    std::string rule = status == "error" ? "gpuemu/setup-error"
                                         : "gpuemu/" + f.value("bug_class", std::string("wrong"));
    if (rule == "gpuemu/") rule = "gpuemu/wrong-result";
    if (rule_ids.insert(rule).second)
      rules.push_back({{"id", rule},
                       {"shortDescription",
                        {{"text", status == "error" ? "The kernel could not be run"
                                                    : "The kernel's output is outside the "
                                                      "tolerance envelope"}}}});
    Json result = {{"ruleId", rule},
                   {"level", "error"},
                   {"message",
                    {{"text", str(r, "name") + " (" + str(r, "kernel") + "): " + headline(r) +
                                  (f.contains("repro") ? "\nrepro: " + str(f, "repro") : "")}}},
                   {"properties",
                    {{"op", r.value("op", "")},
                     {"dtype", r.value("dtype", "")},
                     {"seed", r.value("seed", Json())},
                     {"failure_id", f.value("id", Json())},
                     {"max_error", f.value("max_error", Json())},
                     {"diagnosis", f.value("summary", Json())},
                     {"repro", f.value("repro", Json())}}}};
    const std::string file = str(r, "file");
    Json artifact = {{"uri", "file://" + file}};
    if (!srcroot.empty() && file.rfind(srcroot + "/", 0) == 0)
      artifact = {{"uri", file.substr(srcroot.size() + 1)}, {"uriBaseId", "SRCROOT"}};
    if (!file.empty())
      result["locations"] = {{{"physicalLocation",
                               {{"artifactLocation", artifact},
                                {"region", {{"startLine", std::max(1, r.value("line", 1))}}}}}}};
    results.push_back(std::move(result));
  }
  Json sarif = {
      {"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
      {"version", "2.1.0"},
      {"runs",
       {{{"tool",
          {{"driver",
            {{"name", "gpuemu"}, {"version", doc.value("version", "")}, {"rules", rules}}}}},
         {"results", results}}}}};
  if (!srcroot.empty())
    sarif["runs"][0]["originalUriBaseIds"] = {{"SRCROOT", {{"uri", "file://" + srcroot + "/"}}}};
  return sarif.dump(2) + "\n";
}

std::string report_html(const Json& doc) {
  const Json s = doc.value("summary", Json::object());
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
     << "<title>gpuemu report " << xml_escape(str(doc, "project")) << "</title>\n"
     << "<style>body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;"
        "text-align:left}th{background:#f3f3f3}.passed{color:#176f2c}.failed,.error{color:#b00020;"
        "font-weight:bold}pre{background:#f7f7f7;padding:8px;overflow:auto}"
        ".rate{display:inline-block;height:10px;background:#176f2c}"
        ".rate.low{background:#b00020}figure{margin:1em 0}</style>\n"
     << "</head><body>\n<h1>gpuemu " << xml_escape(doc.value("kind", std::string())) << " report"
     << (str(doc, "project").empty() ? "" : ": " + xml_escape(str(doc, "project"))) << "</h1>\n"
     << "<p>generated " << iso_time(doc.value("generated_ms", std::int64_t{0})) << " by gpuemu "
     << xml_escape(str(doc, "version")) << " &mdash; " << s.value("total", 0) << " tests, "
     << s.value("passed", 0) << " passed, " << s.value("failed", 0) << " failed, "
     << s.value("errors", 0) << " errors</p>\n"
     << "<table><tr><th>test</th><th>kernel</th><th>status</th><th>cases</th><th>max "
        "error</th><th>diagnosis</th></tr>\n";
  for (const auto& r : doc.value("results", Json::array())) {
    const Json f = r.value("failure", Json::object());
    const std::string status = r.value("status", "");
    os << "<tr><td>" << xml_escape(str(r, "name")) << "</td><td>" << xml_escape(str(r, "kernel"))
       << "</td><td class=\"" << xml_escape(status) << "\">" << xml_escape(status) << "</td><td>"
       << (r.contains("cases") ? str(r, "failed_cases") + "/" + str(r, "cases") : "-")
       << "</td><td>" << num(f, "max_error") << "</td><td>" << xml_escape(str(f, "bug_class"))
       << "</td></tr>\n";
  }
  os << "</table>\n";
  for (const auto& r : doc.value("results", Json::array())) {
    if (r.value("status", "") == "passed") continue;
    os << "<h2>" << xml_escape(str(r, "name")) << "</h2>\n<pre>" << xml_escape(failure_detail(r))
       << "</pre>\n";
    const Json f = r.value("failure", Json::object());
    if (const std::string svg = error_map_svg(f.value("error_map", Json())); !svg.empty())
      os << "<figure class=\"error-map\">" << svg << "<figcaption>error map of output '"
         << xml_escape(str(f["error_map"], "output")) << "' " << xml_escape(str(f["error_map"], "shape"))
         << ": normalised error per element, log scale; " << str(f["error_map"], "over")
         << " cell(s) over the envelope</figcaption></figure>\n";
  }
  const Json rates = doc.value("pass_rates", Json::array());
  if (!rates.empty()) {
    os << "<h2>Pass rates per op and dtype</h2>\n<table class=\"pass-rates\"><tr><th>op</th>"
          "<th>dtype</th><th>runs</th><th>cases passed</th><th>rate</th></tr>\n";
    for (const auto& row : rates) {
      const double rate = row.value("rate", 0.0);
      os << "<tr><td>" << xml_escape(str(row, "op")) << "</td><td>" << xml_escape(str(row, "dtype"))
         << "</td><td>" << xml_escape(str(row, "runs")) << "</td><td>"
         << xml_escape(str(row, "passed")) << "/" << xml_escape(str(row, "cases")) << "</td><td>"
         << "<span class=\"rate" << (rate < 1.0 ? " low" : "") << "\" style=\"width:"
         << static_cast<int>(rate * 100) << "px\"></span> " << std::fixed << std::setprecision(1)
         << rate * 100 << std::defaultfloat << "%</td></tr>\n";
    }
    os << "</table>\n";
  }
  const Json firsts = doc.value("first_failures", Json::array());
  if (!firsts.empty()) {
    os << "<h2>Cases to the first failure</h2>\n<table class=\"first-failures\"><tr><th>run</th>"
          "<th>op</th><th>kernel</th><th>first failing case</th><th>cases run</th></tr>\n";
    for (const auto& row : firsts)
      os << "<tr><td>" << xml_escape(str(row, "id"))
         << (row.value("time_ms", Json()).is_number()
                 ? " " + iso_time(row["time_ms"].get<std::int64_t>())
                 : std::string())
         << "</td><td>" << xml_escape(str(row, "op")) << (str(row, "dtype").empty() ? "" : "[" + xml_escape(str(row, "dtype")) + "]")
         << "</td><td>" << xml_escape(str(row, "kernel")) << "</td><td>"
         << xml_escape(str(row, "cases_to_first_failure")) << "</td><td>"
         << xml_escape(str(row, "total")) << "</td></tr>\n";
    os << "</table>\n";
  }
  const Json runs = doc.value("runs", Json::array());
  if (!runs.empty()) {
    os << "<h2>Recent CI runs</h2>\n<table><tr><th>time</th><th>project</th><th>preset</th>"
          "<th>passed</th><th>failed</th><th>errors</th></tr>\n";
    for (const auto& run : runs)
      os << "<tr><td>" << iso_time(run.value("time_ms", std::int64_t{0})) << "</td><td>"
         << xml_escape(str(run, "project")) << "</td><td>" << xml_escape(str(run, "preset"))
         << "</td><td>" << xml_escape(str(run, "passed")) << "/" << xml_escape(str(run, "total"))
         << "</td><td>" << xml_escape(str(run, "failed")) << "</td><td>"
         << xml_escape(str(run, "errors")) << "</td></tr>\n";
    os << "</table>\n";
  }
  const Json druns = doc.value("daemon_runs", Json::array());
  if (!druns.empty()) {
    os << "<h2>Daemon runs</h2>\n<table><tr><th>time</th><th>id</th><th>kind</th><th>op</th>"
          "<th>kernel</th><th>passed</th><th>first failure at case</th></tr>\n";
    for (const auto& run : druns)
      os << "<tr><td>" << iso_time(run.value("time_ms", std::int64_t{0})) << "</td><td>"
         << xml_escape(str(run, "id")) << "</td><td>" << xml_escape(str(run, "kind"))
         << "</td><td>" << xml_escape(str(run, "op")) << "</td><td>"
         << xml_escape(str(run, "kernel")) << "</td><td>" << xml_escape(str(run, "passed")) << "/"
         << xml_escape(str(run, "total")) << xml_escape(backward_parts(run)) << "</td><td>"
         << (run.contains("first_failure") && run["first_failure"].is_number_integer() &&
                     run["first_failure"].get<std::int64_t>() >= 0
                 ? std::to_string(run["first_failure"].get<std::int64_t>())
                 : std::string("-"))
         << "</td></tr>\n";
    os << "</table>\n";
  }
  os << "</body></html>\n";
  return os.str();
}

std::string render_report(const Json& doc, const std::string& format) {
  if (format == "text") return report_text(doc);
  if (format == "json") return doc.dump(2) + "\n";
  if (format == "junit") return report_junit(doc);
  if (format == "sarif") return report_sarif(doc);
  if (format == "html") return report_html(doc);
  throw GpuemuException(
      make_error(ErrorCode::invalid_argument,
                 "unknown report format '" + format + "' (text, json, junit, sarif, html)"));
}

}  // namespace gpuemu::cli
