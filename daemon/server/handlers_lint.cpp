// lint and baselines: the PTX/SASS analyzer, with its baselines kept in the store.
#include "daemon_context.hpp"

#include "gpuemu/lint/analyzer.hpp"
#include "gpuemu/lint/diff.hpp"
#include "gpuemu/lint/policy.hpp"
#include "gpuemu/lint/report.hpp"
#include "gpuemu/protocol/wire/lint.hpp"

namespace gpuemu::server {
namespace {

Result<wire::LintReply> lint_cmd(DaemonContext& ctx, const wire::LintRequest& p) {
  lint::LintRequest lr;
  const Json paths = p.paths.is_null() ? Json::array() : p.paths;
  if (!paths.is_array() || paths.empty())
    return make_error(ErrorCode::invalid_argument, "'paths' must list files or directories");
  for (const auto& x : paths) {
    if (!x.is_string()) return make_error(ErrorCode::invalid_argument, "'paths' must be strings");
    lr.inputs.emplace_back(x.get<std::string>());
  }
  lint::LintPolicy policy;
  if (p.policy_toml.is_string()) {
    GPUEMU_TRY(policy, lint::parse_policy(p.policy_toml.get<std::string>(), p.policy_source));
  }
  lr.arches = p.arches.value_or(policy.arches);
  lr.nvcc_flags = p.nvcc_flags.value_or(policy.nvcc_flags);
  GPUEMU_TRY(lint::LintReport report, lint::analyze(lr));
  std::optional<lint::Baseline> baseline;
  const std::string& bname = p.baseline;
  if (!bname.empty()) {
    if (!ctx.store)
      return make_error(ErrorCode::unavailable, "this daemon has no store for baselines");
    GPUEMU_TRY(auto stored, ctx.store->get_baseline(bname));
    if (!stored) return make_error(ErrorCode::not_found, "no baseline named '" + bname + "'");
    GPUEMU_TRY(baseline, lint::baseline_from_json(*stored));
  }
  const lint::LintVerdict verdict = lint::evaluate(report, baseline ? &*baseline : nullptr, policy);
  wire::LintReply j;
  j.report = lint::report_to_json(report, verdict);
  j.failed = verdict.failed();
  const std::string& update = p.update_baseline;
  if (!update.empty()) {
    if (!ctx.store)
      return make_error(ErrorCode::unavailable, "this daemon has no store for baselines");
    GPUEMU_TRY_STATUS(ctx.store->put_baseline(update, Json(lint::make_baseline(report))));
    j.baseline_written = update;
  }
  return j;
}

Result<wire::BaselinesReply> baselines(DaemonContext& ctx, const wire::BaselinesRequest& p) {
  if (!ctx.store)
    return make_error(ErrorCode::unavailable, "this daemon has no store for baselines");
  const std::string& action = p.action;
  wire::BaselinesReply r;
  if (action == "list") {
    GPUEMU_TRY(r.baselines, ctx.store->list_baselines());
    return r;
  }
  if (p.name.empty()) return wire::missing_string("name");
  const std::string& name = p.name;
  if (action == "get") {
    GPUEMU_TRY(auto v, ctx.store->get_baseline(name));
    if (!v) return make_error(ErrorCode::not_found, "no baseline named '" + name + "'");
    r.name = name;
    r.baseline = *v;
    return r;
  }
  if (action == "put") {
    if (p.baseline.is_null())
      return make_error(ErrorCode::invalid_argument, "'put' needs a 'baseline' object");
    GPUEMU_TRY(auto b, lint::baseline_from_json(p.baseline));  // validated before it is stored
    GPUEMU_TRY_STATUS(ctx.store->put_baseline(name, Json(b)));
    r.name = name;
    r.stored = true;
    return r;
  }
  if (action == "delete") {
    GPUEMU_TRY_STATUS(ctx.store->delete_baseline(name));
    r.deleted = name;
    return r;
  }
  return make_error(ErrorCode::invalid_argument,
                    "baselines action '" + action + "' is not one of list, get, put, delete");
}

}  // namespace

void add_lint_handlers(HandlerTable& out) {
  out["lint"] = typed(lint_cmd);
  out["baselines"] = typed(baselines);
}

}  // namespace gpuemu::server
