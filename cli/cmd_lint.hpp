// gpuemu lint: the options struct and the run function (docs/lint.md); register_lint_commands binds
// the flags.
#pragma once

#include "cli_common.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace gpuemu::cli {

struct LintOptions {
  std::vector<std::string> paths;
  std::vector<std::string> arches;
  bool json = false;
  std::string format = "text";
  std::string save_baseline;
  std::string baseline;
  std::string save_baseline_tag;  // in the daemon's store (LMDB) under this tag
  std::string baseline_tag;
  std::string config;
  std::string output;
  std::vector<std::string> nvcc_flags;
  std::vector<std::string> tools_dirs;
  bool no_disasm = false;
  bool no_lineinfo = false;
};

// The report on `out` (or --output); the daemon at `daemon` holds tagged baselines. Returns the
// exit code: 1 on a regression, 2 (after one error line on stderr) on a usage or setup error.
int run_lint(const LintOptions& o, const DaemonAddress& daemon, std::ostream& out);

}  // namespace gpuemu::cli
