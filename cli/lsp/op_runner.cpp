#include "lsp/op_runner.hpp"

#include <gpuemu/protocol/protocol.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace gpuemu::lsp {
namespace fs = std::filesystem;

std::string entry_id(const project::ProjectOp& op, std::size_t index) {
  return std::to_string(index) + ":" + op.op + ":" + op.kernel_label();
}

wire::FuzzRequest fuzz_params(const project::ProjectConfig& cfg, const project::ProjectOp& op,
                              const RunOptions& o) {
  std::int64_t iterations = op.iterations;
  if (o.quick)
    iterations =
        std::max<std::int64_t>(10, std::llround(static_cast<double>(op.iterations) * 0.25));
  wire::FuzzRequest params;
  params.op = op.op;
  params.kernel = op.kernel_spec();
  params.options = op.fuzz_options("");
  params.iterations = iterations;
  params.fail_fast = false;
  params.minimize = false;
  params.diagnose_limit = 1;
  params.repro_prefix = op.repro_prefix(op.dtypes);  // the entry's options too, as gpuemu ci
  params.client = {{"name", "gpuemu-lsp"}, {"config", cfg.file.string()}};
  if (op.seed) params.seed = *op.seed;
  if (const project::CustomOp* custom = cfg.custom_op(op.op)) params.custom_op = custom->spec();
  if (!op.envelope.empty()) {
    params.envelope = Json::object();
    for (const auto& [dt, v] : op.envelope) params.envelope[dt] = v;
  }
  return params;
}

Json run_entry(DaemonSession& daemon, const project::ProjectConfig& cfg, std::size_t index,
               const RunOptions& o) {
  const project::ProjectOp& op = cfg.ops.at(index);
  Json r = {{"id", entry_id(op, index)}, {"op", op.op}, {"kernel", op.kernel_label()}};
  auto rep = daemon.call(fuzz_params(cfg, op, o), true);
  if (!rep) {
    r["status"] = "error";
    r["message"] = rep.error().message;
    return r;
  }
  const std::int64_t total = rep->value("total", std::int64_t{0});
  const std::int64_t passed = rep->value("passed", std::int64_t{0});
  r["status"] = total == passed ? "passed" : "failed";
  r["total"] = total;
  r["passed"] = passed;
  r["failed"] = total - passed;
  r["first_failure"] = rep->value("first_failure", std::int64_t{-1});
  r["failure_ids"] = rep->value("failure_ids", Json::array());
  r["run_id"] = rep->value("run_id", Json());
  r["elapsed"] = rep->value("elapsed", Json());
  const Json failures = rep->value("failures", Json::array());
  r["message"] = failures.empty()
                     ? std::to_string(passed) + "/" + std::to_string(total) + " cases passed"
                     : failures.front().value("message", std::string());
  return r;
}

std::vector<std::size_t> entries_for_script(const project::ProjectConfig& cfg,
                                            const std::string& path) {
  std::vector<std::size_t> out;
  std::error_code ec;
  const fs::path want = fs::weakly_canonical(path, ec);
  for (std::size_t i = 0; i < cfg.ops.size(); ++i) {
    if (cfg.ops[i].script.empty()) continue;
    if (fs::weakly_canonical(cfg.ops[i].script, ec) == want) out.push_back(i);
  }
  return out;
}

}  // namespace gpuemu::lsp
