// gpuemu ops list | show, gpuemu cases: the catalogue and the fuzzer's generated cases. Each
// command is an options struct and a run_* function that prints on `out` and returns the exit code
// (errors are thrown as GpuemuException); register_ops_commands binds the flags to the structs.
#pragma once

#include "case_flags.hpp"
#include "cli_common.hpp"

#include <cstdint>
#include <ostream>
#include <string>

namespace gpuemu::cli {

// gpuemu ops list [--json]
struct OpsListOptions {
  bool json = false;
};
int run_ops_list(const OpsListOptions& o, std::ostream& out);

// gpuemu ops show OP [--json]
struct OpsShowOptions {
  std::string op;
  bool json = false;
};
int run_ops_show(const OpsShowOptions& o, std::ostream& out);

// gpuemu cases OP --seed S [--count N] [case flags] [--json]
struct CasesOptions {
  std::string op;
  std::uint64_t seed = 0;
  std::int64_t count = 5;
  bool json = false;
  CaseFlags flags;
};
int run_cases(const CasesOptions& o, std::ostream& out);

}  // namespace gpuemu::cli
