// The `gpuemu/ops` request (docs/protocol.md, "The editor's requests"): the ops registered in the
// workspace's gpuemu.toml, each with where it lives and its last status from the daemon's run
// history, for the editor's Test Explorer.
#pragma once

#include "lsp/failure_diagnostics.hpp"
#include "lsp/workspace.hpp"

namespace gpuemu::lsp {

// {config, error?, ops: [{id, op, kernel, kind, uri, range, config_uri, config_line, dtypes,
//   iterations, status: passed | failed | unknown, last?: {run_id, started_ms, total, passed},
//   current_failures}]}
Json registered_ops(const Workspace& ws, const Json& runs, const std::vector<PlacedGroup>& groups);

}  // namespace gpuemu::lsp
