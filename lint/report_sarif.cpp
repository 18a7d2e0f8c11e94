// SARIF 2.1.0: one run, one result per finding, located at the PTX line info when there is some.
#include "gpuemu/lint/report.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

namespace gpuemu::lint {

using nlohmann::json;

namespace {

const char* rule_description(const std::string& rule) {
  if (rule == "max-registers") return "Registers per thread above the policy's max_registers";
  if (rule == "max-shared") return "Static shared memory above the policy's max_shared_bytes";
  if (rule == "max-stack") return "Stack frame above the policy's max_stack_bytes";
  if (rule == "spills") return "Register spills while the policy disallows them";
  if (rule == "forbidden-class") return "An instruction class the policy forbids";
  if (rule == "missing-kernel") return "A baseline kernel that is no longer found";
  if (rule == "new-kernel") return "A kernel that is not in the baseline";
  if (rule == "improved") return "Metrics that shrank against the baseline";
  if (rule == "mix-changed") return "PTX instruction classes whose counts moved";
  if (rule == "toolkit-changed") return "The baseline was made with another CUDA toolkit";
  if (rule == "delta-spills") return "Spill bytes grew against the baseline";
  return "A metric grew against the baseline beyond the policy's thresholds";
}

std::string escape_uri(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ' ') out += "%20";
    else if (c == '%') out += "%25";
    else if (c == '#') out += "%23";
    else out += c;
  }
  return out;
}

// Paths under the working directory become relative to SRCROOT (code-scanning UIs resolve them
// against the checkout); other absolute paths become file:// URIs.
json artifact(const std::string& path, const std::string& root) {
  if (!path.empty() && path[0] == '/') {
    if (!root.empty() && path.rfind(root, 0) == 0)
      return {{"uri", escape_uri(path.substr(root.size()))}, {"uriBaseId", "SRCROOT"}};
    return {{"uri", "file://" + escape_uri(path)}};
  }
  return {{"uri", escape_uri(path)}, {"uriBaseId", "SRCROOT"}};
}

json location_json(const Finding& f, const std::string& root) {
  json physical;
  if (f.location) {
    physical["artifactLocation"] = artifact(f.location->file, root);
    json region = {{"startLine", std::max(1, f.location->line)}};
    if (f.location->column > 0) region["startColumn"] = f.location->column;
    physical["region"] = region;
  } else {
    physical["artifactLocation"] = artifact(f.input, root);
  }
  return json::array({json{{"physicalLocation", physical}}});
}

// The working directory with a trailing slash, "" when unknown.
std::string working_root() {
  std::error_code ec;
  std::string root = std::filesystem::current_path(ec).string();
  if (ec || root.empty()) return {};
  return root.back() == '/' ? root : root + "/";
}

}  // namespace

json render_sarif(const LintReport& report, const LintVerdict& verdict) {
  std::string root = working_root();
  std::set<std::string> rules;
  json results = json::array();
  for (const Finding& f : verdict.findings) {
    rules.insert(f.rule);
    json result = {
        {"ruleId", f.rule},
        {"level", std::string(severity_name(f.severity))},
        {"message",
         {{"text", f.kernel.empty() ? f.message : f.kernel + " (" + f.arch + "): " + f.message}}}};
    if (f.location || !f.input.empty()) result["locations"] = location_json(f, root);
    if (!f.kernel.empty()) result["properties"] = {{"kernel", f.kernel}, {"arch", f.arch}};
    results.push_back(result);
  }
  json rule_list = json::array();
  for (const std::string& r : rules)
    rule_list.push_back({{"id", r}, {"shortDescription", {{"text", rule_description(r)}}}});
  json notifications = json::array();
  for (const std::string& note : report.notes)
    notifications.push_back({{"level", "note"}, {"message", {{"text", note}}}});
  json run = {{"tool",
               {{"driver",
                 {{"name", "gpuemu-lint"},
                  {"informationUri", "https://github.com/gpuemu/gpuemu/blob/main/docs/lint.md"},
                  {"rules", rule_list}}}}},
              {"results", results},
              {"invocations", json::array({{{"executionSuccessful", true},
                                            {"toolExecutionNotifications", notifications}}})}};
  if (!root.empty()) run["originalUriBaseIds"] = {{"SRCROOT", {{"uri", "file://" + escape_uri(root)}}}};
  if (!report.toolkit.empty()) run["properties"] = {{"cudaToolkit", report.toolkit}};
  return json{{"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
              {"version", "2.1.0"},
              {"runs", json::array({run})}};
}

}  // namespace gpuemu::lint
