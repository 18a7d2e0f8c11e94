// gpuemu kernelbench: the options struct and the run function; register_kernelbench_commands hands
// every argument to the judge.
#pragma once

#include "cli_common.hpp"

#include <string>
#include <vector>

namespace gpuemu::cli {

struct KernelbenchOptions {
  std::vector<std::string> args;  // every argument after `kernelbench`, --help included
};

// Replaces this process with `python -m gpuemu.kernelbench ARGS...`; returns only when that cannot
// start (exit code 2, after one error line on stderr).
int run_kernelbench(const KernelbenchOptions& o);

}  // namespace gpuemu::cli
