// runs, coverage: the coverage family (gpuemu/protocol/wire/coverage.hpp; docs/protocol.md).
// The accounting is the engine's (gpuemu/engine/coverage.hpp): every fuzz run counts its cases, the
// store keeps each run's counters, and `coverage` sums them per op.
#include "daemon_context.hpp"
#include "gpuemu/engine/coverage.hpp"
#include "gpuemu/protocol/wire/coverage.hpp"

namespace gpuemu::server {

namespace {

Result<wire::RunsReply> runs(DaemonContext& ctx, const wire::RunsRequest& p) {
  if (!ctx.store) return make_error(ErrorCode::unavailable, "this daemon has no store");
  const std::string& op = p.op;
  GPUEMU_TRY(auto list, ctx.store->list_runs(p.limit));
  wire::RunsReply out;
  // An op's runs include the gradients part of its backward=True runs (op <op>_backward,
  // part_of.op = op), which the report joins to their forward part.
  auto part_of_op = [&](const Json& r) {
    const auto it = r.find("part_of");
    return it != r.end() && it->is_object() && it->value("op", "") == op;
  };
  for (auto& r : list)
    if (op.empty() || r.value("op", "") == op || part_of_op(r)) out.runs.push_back(std::move(r));
  return out;
}

Result<wire::CoverageReply> coverage(DaemonContext& ctx, const wire::CoverageRequest& p) {
  if (!ctx.store) return make_error(ErrorCode::unavailable, "this daemon has no store");
  const std::string& only = p.op;
  if (!only.empty()) GPUEMU_TRY_STATUS(ctx.engine.catalogue().get(only));
  GPUEMU_TRY(auto list, ctx.store->list_runs(0));
  std::map<std::string, Json> by_op;
  std::map<std::string, std::int64_t> run_count;
  for (const auto& r : list) {
    const std::string op = r.value("op", "");
    if (op.empty() || (!only.empty() && op != only) || !r.contains("coverage")) continue;
    coverage_merge(by_op[op], r["coverage"]);
    ++run_count[op];
  }
  wire::CoverageReply out;
  Json& ops = out.ops;
  for (const OpSchema* s : ctx.engine.catalogue().all()) {
    if (!only.empty() && s->name != only) continue;
    if (only.empty() && !by_op.count(s->name) && !p.all) continue;
    Json rep = coverage_report(*s, by_op.count(s->name) ? by_op[s->name] : Json::object());
    rep["runs"] = run_count[s->name];
    ops.push_back(std::move(rep));
  }
  return out;
}

}  // namespace

void add_coverage_handlers(HandlerTable& out) {
  out["runs"] = typed(runs);
  out["coverage"] = typed(coverage);
}

}  // namespace gpuemu::server
