// gpuemu coverage: the options struct and the run function; register_coverage_commands binds the
// flags.
#pragma once

#include "cli_common.hpp"

#include <ostream>
#include <string>

namespace gpuemu::cli {

struct CoverageOptions {
  std::string op;       // only this op
  std::string codecov;  // also write a codecov-style file here
  bool json = false;
  bool all = false;  // also list ops never fuzzed
};

// What the daemon at `daemon` has recorded, on `out`; returns the exit code (errors thrown).
int run_coverage(const CoverageOptions& o, const DaemonAddress& daemon, std::ostream& out);

}  // namespace gpuemu::cli
