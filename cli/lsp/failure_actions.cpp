#include "lsp/failure_actions.hpp"

#include "lsp/repro_script.hpp"

namespace gpuemu::lsp {
namespace {

std::string kind_of(const Json& record) {
  return record.value("kernel", Json::object()).value("kind", "");
}

// The op's input names in schema order.
Result<std::vector<std::string>> input_names(DaemonSession& daemon, const std::string& op) {
  GPUEMU_TRY(Json schema, daemon.call(wire::DescribeOpRequest{op}, true));
  std::vector<std::string> names;
  for (const auto& in : schema.value("inputs", Json::array()))
    if (in.is_object() && in.contains("name")) names.push_back(in["name"].get<std::string>());
  return names;
}

Result<ReproScript> script_for(DaemonSession& daemon, const Json& record) {
  GPUEMU_TRY(auto names, input_names(daemon, record.value("op", "")));
  return write_repro_script(record, names, daemon.hello().value("home", daemon.home()));
}

std::string verdict_word(const Json& r) {
  if (!r.contains("passed") || r["passed"].is_null()) return "not re-run";
  return r["passed"].get<bool>() ? "now PASSES" : "still FAILS";
}

}  // namespace

Json failure_code_actions(const Json& diagnostics) {
  Json actions = Json::array();
  if (!diagnostics.is_array()) return actions;
  for (const auto& d : diagnostics) {
    if (!d.is_object() || d.value("source", "") != "gpuemu" || !d.contains("data") ||
        !d["data"].is_object() || !d["data"].contains("failure_id"))
      continue;
    const std::string id = d["data"].value("failure_id", "");
    if (id.empty()) continue;
    const std::string label =
        " (" + d["data"].value("op", "") + " " + d["data"].value("dtype", "") + ", " + id + ")";
    actions.push_back({{"title", "Reproduce failure" + label},
                       {"kind", "quickfix"},
                       {"diagnostics", Json::array({d})},
                       {"command",
                        {{"title", "Reproduce failure"},
                         {"command", k_cmd_reproduce},
                         {"arguments", Json::array({id})}}}});
    actions.push_back({{"title", "Minimize test case" + label},
                       {"kind", "quickfix"},
                       {"diagnostics", Json::array({d})},
                       {"command",
                        {{"title", "Minimize test case"},
                         {"command", k_cmd_minimize},
                         {"arguments", Json::array({id})}}}});
  }
  return actions;
}

Result<Json> reproduce_failure(DaemonSession& daemon, const std::string& id,
                               const ActionOptions& options) {
  GPUEMU_TRY(Json record, daemon.call(wire::failures_get(id), true));
  if (kind_of(record) == "client") {
    GPUEMU_TRY(ReproScript script, script_for(daemon, record));
    Json j = {
        {"id", id}, {"kind", "script"}, {"script", script.path}, {"uri", path_to_uri(script.path)}};
    auto run =
        run_repro_script(options.python, script.path, {}, daemon.home(), options.script_timeout_s);
    if (!run) {
      j["error"] = run.error().message;
      j["summary"] = "wrote " + script.path + " (running it failed: " + run.error().message + ")";
      return j;
    }
    j["result"] = *run;
    j["passed"] = run->value("passed", Json());
    j["summary"] = id + ": " + verdict_word(*run) + " on the stored inputs (" +
                   run->value("message", std::string()) + "); repro script " + script.path;
    return j;
  }
  GPUEMU_TRY(Json r, daemon.call(wire::ReproduceRequest{id}, true));
  Json j = r;
  j.erase("case");
  j["kind"] = "replay";
  j["summary"] = id + ": " + verdict_word(r) + " (" + r.value("message", std::string()) +
                 "); regenerated from its seed: " +
                 (r.value("regenerated_identical", false) ? "byte-identical" : "DIFFERENT bytes");
  return j;
}

Result<Json> minimize_failure(DaemonSession& daemon, const std::string& id,
                              const ActionOptions& options) {
  GPUEMU_TRY(Json record, daemon.call(wire::failures_get(id), true));
  if (kind_of(record) == "client") {
    GPUEMU_TRY(ReproScript script, script_for(daemon, record));
    GPUEMU_TRY(Json r, run_repro_script(options.python, script.path, {"--minimize"}, daemon.home(),
                                        options.script_timeout_s));
    Json j = r;
    j["id"] = id;
    j["kind"] = "client";
    j["script"] = script.path;
    j["summary"] = id + " minimized: " + r.value("summary", std::string("(no summary)"));
    return j;
  }
  GPUEMU_TRY(Json r, daemon.call(wire::MinimizeRequest{id}, true));
  Json j = r;
  j["kind"] = "daemon";
  j["summary"] =
      id + " minimized: " + r.value("summary", std::string()) +
      (r.contains("minimized_id") ? " (stored as " + r["minimized_id"].get<std::string>() + ")"
                                  : std::string());
  return j;
}

}  // namespace gpuemu::lsp
