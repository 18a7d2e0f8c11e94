#include "lsp/registered_ops.hpp"

#include "lsp/failure_index.hpp"
#include "lsp/kernel_locator.hpp"
#include "lsp/op_runner.hpp"

namespace gpuemu::lsp {

Json registered_ops(const Workspace& ws, const Json& runs, const std::vector<PlacedGroup>& groups) {
  Json out = {{"config", ws.config_path()}, {"ops", Json::array()}};
  auto cfg = ws.config();
  if (!cfg) {
    out["error"] = cfg.error().message;
    return out;
  }
  const std::vector<KernelStatus> statuses = last_statuses(runs);
  for (std::size_t i = 0; i < cfg->ops.size(); ++i) {
    const project::ProjectOp& op = cfg->ops[i];
    const std::string key = kernel_key(op.kernel_spec());
    const int toml_line = std::max(0, op.line - 1);
    Json j = {{"id", entry_id(op, i)},
              {"op", op.op},
              {"kernel", op.kernel_label()},
              {"kind", op.script.empty() ? "builtin" : "script"},
              {"dtypes", op.dtypes},
              {"iterations", op.iterations},
              {"config_uri", path_to_uri(cfg->file.string())},
              {"config_line", toml_line}};
    if (!op.script.empty()) {
      j["uri"] = path_to_uri(op.script);
      auto r = locate_def(ws.text(op.script), op.function, 0);
      j["range"] = to_json(r.value_or(Range{{0, 0}, {0, 0}}));
    } else {
      j["uri"] = j["config_uri"];
      j["range"] = to_json(Range{{toml_line, 0}, {toml_line, 5}});
    }
    std::size_t current = 0;
    for (const auto& g : groups)
      if (g.group.kernel_key == key && g.group.op == op.op) current += g.group.failures.size();
    j["current_failures"] = current;
    j["status"] = "unknown";
    for (const auto& s : statuses)
      if (s.kernel_key == key && s.op == op.op) {
        j["status"] = s.passed && current == 0 ? "passed" : "failed";
        j["last"] = {{"run_id", s.run_id},
                     {"started_ms", s.started_ms},
                     {"total", s.total},
                     {"passed", s.passed_cases}};
      }
    if (j["status"] == "unknown" && current > 0) j["status"] = "failed";
    out["ops"].push_back(std::move(j));
  }
  return out;
}

}  // namespace gpuemu::lsp
