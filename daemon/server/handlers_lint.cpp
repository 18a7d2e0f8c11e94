// lint and baselines: the PTX/SASS analyzer, with its baselines kept in the store.
#include "server/daemon_context.hpp"

#include "gpuemu/lint/analyzer.hpp"
#include "gpuemu/lint/diff.hpp"
#include "gpuemu/lint/policy.hpp"
#include "gpuemu/lint/report.hpp"

namespace gpuemu::server {
namespace {

using protocol::Frame;
using protocol::make_reply;

Result<Frame> lint_cmd(DaemonContext& ctx, const Frame& req) {
  const Json p = req.header.value("params", Json::object());
  lint::LintRequest lr;
  const Json paths = p.value("paths", Json::array());
  if (!paths.is_array() || paths.empty())
    return make_error(ErrorCode::invalid_argument, "'paths' must list files or directories");
  for (const auto& x : paths) {
    if (!x.is_string()) return make_error(ErrorCode::invalid_argument, "'paths' must be strings");
    lr.inputs.emplace_back(x.get<std::string>());
  }
  lint::LintPolicy policy;
  if (p.contains("policy_toml") && p["policy_toml"].is_string()) {
    GPUEMU_TRY(policy, lint::parse_policy(p["policy_toml"].get<std::string>(),
                                          p.value("policy_source", "policy")));
  }
  lr.arches = p.value("arches", policy.arches);
  lr.nvcc_flags = p.value("nvcc_flags", policy.nvcc_flags);
  GPUEMU_TRY(lint::LintReport report, lint::analyze(lr));
  std::optional<lint::Baseline> baseline;
  const std::string bname = p.value("baseline", "");
  if (!bname.empty()) {
    if (!ctx.store)
      return make_error(ErrorCode::unavailable, "this daemon has no store for baselines");
    GPUEMU_TRY(auto stored, ctx.store->get_baseline(bname));
    if (!stored) return make_error(ErrorCode::not_found, "no baseline named '" + bname + "'");
    GPUEMU_TRY(baseline, lint::baseline_from_json(*stored));
  }
  const lint::LintVerdict verdict = lint::evaluate(report, baseline ? &*baseline : nullptr, policy);
  Json j = lint::report_to_json(report, verdict);
  j["failed"] = verdict.failed();
  const std::string update = p.value("update_baseline", "");
  if (!update.empty()) {
    if (!ctx.store)
      return make_error(ErrorCode::unavailable, "this daemon has no store for baselines");
    GPUEMU_TRY_STATUS(ctx.store->put_baseline(update, Json(lint::make_baseline(report))));
    j["baseline_written"] = update;
  }
  return make_reply(j);
}

Result<Frame> baselines(DaemonContext& ctx, const Frame& req) {
  const Json p = req.header.value("params", Json::object());
  if (!ctx.store)
    return make_error(ErrorCode::unavailable, "this daemon has no store for baselines");
  const std::string action = p.value("action", "list");
  if (action == "list") {
    GPUEMU_TRY(auto names, ctx.store->list_baselines());
    return make_reply({{"baselines", names}});
  }
  GPUEMU_TRY(std::string name, string_param(p, "name"));
  if (action == "get") {
    GPUEMU_TRY(auto v, ctx.store->get_baseline(name));
    if (!v) return make_error(ErrorCode::not_found, "no baseline named '" + name + "'");
    return make_reply({{"name", name}, {"baseline", *v}});
  }
  if (action == "put") {
    if (!p.contains("baseline"))
      return make_error(ErrorCode::invalid_argument, "'put' needs a 'baseline' object");
    GPUEMU_TRY(auto b, lint::baseline_from_json(p["baseline"]));  // validated before it is stored
    GPUEMU_TRY_STATUS(ctx.store->put_baseline(name, Json(b)));
    return make_reply({{"name", name}, {"stored", true}});
  }
  if (action == "delete") {
    GPUEMU_TRY_STATUS(ctx.store->delete_baseline(name));
    return make_reply({{"deleted", name}});
  }
  return make_error(ErrorCode::invalid_argument,
                    "baselines action '" + action + "' is not one of list, get, put, delete");
}

}  // namespace

void add_lint_handlers(HandlerTable& out) {
  out["lint"] = lint_cmd;
  out["baselines"] = baselines;
}

}  // namespace gpuemu::server
