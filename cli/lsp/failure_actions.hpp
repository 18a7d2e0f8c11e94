// The code actions of a failure diagnostic, as commands the editor executes
// (workspace/executeCommand):
//   gpuemu.reproduce [id]  a kernel the daemon runs (built-in, script): the daemon's `reproduce`
//                          (regenerated from the seed, byte-compared, re-run, judged); a kernel
//                          that ran in a Python client: a standalone repro script written next to
//                          its file (repro_script.hpp), then run with the configured Python.
//   gpuemu.minimize [id]   the daemon's `minimize` (the minimized case is stored as a failure of
//                          its own), or the repro script's --minimize for a client kernel.
// Each returns a JSON result with a one-line `summary` the editor shows.
#pragma once

#include "lsp/daemon_session.hpp"
#include "lsp/lsp_types.hpp"

#include <string>
#include <vector>

namespace gpuemu::lsp {

inline constexpr const char* k_cmd_reproduce = "gpuemu.reproduce";
inline constexpr const char* k_cmd_minimize = "gpuemu.minimize";

struct ActionOptions {
  std::string python = "python3";  // runs client kernels' repro scripts
  int script_timeout_s = 600;
};

// The code actions for the gpuemu diagnostics among `diagnostics` (the codeAction request's
// context.diagnostics), each with its command.
Json failure_code_actions(const Json& diagnostics);

Result<Json> reproduce_failure(DaemonSession& daemon, const std::string& id,
                               const ActionOptions& options);
Result<Json> minimize_failure(DaemonSession& daemon, const std::string& id,
                              const ActionOptions& options);

}  // namespace gpuemu::lsp
