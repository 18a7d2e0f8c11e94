// Running the ops registered in gpuemu.toml from the editor: the Test Explorer's "run" and the
// re-validation on save. Each [[op]] entry is one daemon `fuzz` request over its dtypes, with the
// same kernel spec, options, custom op and envelope override as `gpuemu ci` sends.
#pragma once

#include "lsp/daemon_session.hpp"
#include <gpuemu/project/project_config.hpp>

#include <string>
#include <vector>

namespace gpuemu::lsp {

// An entry's id in the editor: "<index>:<op>:<kernel label>" (index in the file's [[op]] list).
std::string entry_id(const project::ProjectOp& op, std::size_t index);

struct RunOptions {
  bool quick = false;  // the quick preset: iterations / 4, at least 10 (on save)
};

// The `fuzz` request of one entry.
wire::FuzzRequest fuzz_params(const project::ProjectConfig& cfg, const project::ProjectOp& op,
                              const RunOptions& o);

// Runs one entry; {id, op, kernel, status: passed | failed | error, total, passed, failed,
// first_failure, failure_ids, message, run_id, elapsed}.
Json run_entry(DaemonSession& daemon, const project::ProjectConfig& cfg, std::size_t index,
               const RunOptions& o);

// The entries whose script is `path` (the saved file).
std::vector<std::size_t> entries_for_script(const project::ProjectConfig& cfg, const std::string& path);

}  // namespace gpuemu::lsp
