// The lint service: turns compiled (or compilable) GPU kernels into KernelMetrics. No CLI and no
// printing in here; the `gpuemu lint` command, the daemon and the tests all call analyze().
//
// Inputs, by kind:
//  - `.cu`: compiled here with nvcc to PTX (one compile per --arch), then ptxas -v to a cubin;
//  - `.ptx`: ptxas -v for each requested arch (default: the PTX's own `.target`);
//  - `.cubin`: read as is (its arch is the one it was built for; no spill figures);
//  - a directory: searched recursively for kernels; a `<name>.json` next to `<name>.ptx` /
//    `<name>.cubin` marks a Triton cache entry (kernel name, arch, num_warps/num_stages from it).
// Errors (returned, never thrown): a missing input (not_found), malformed PTX or cubin and an
// unknown arch or a failed compile (invalid_argument), a missing nvcc/ptxas (tool_missing).
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/lint/baseline.hpp"
#include "gpuemu/lint/metrics.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace gpuemu::lint {

inline constexpr const char* k_default_arch = "sm_90";

struct LintRequest {
  std::vector<std::filesystem::path> inputs;
  // Targets for .cu inputs (default sm_90) and .ptx inputs (default: the PTX's .target).
  std::vector<std::string> arches;
  std::vector<std::string> nvcc_flags;  // extra nvcc arguments for .cu inputs (-I, -D, -O3, ...)
  bool line_info = true;                // compile .cu with -lineinfo (SARIF locations)
  // Where to look for nvcc, ptxas, cuobjdump, nvdisasm. Empty: $CUDA_HOME/bin, /usr/local/cuda/bin,
  // then PATH. Non-empty: only these directories (tests use it to simulate a missing toolkit).
  std::vector<std::filesystem::path> tool_dirs;
  bool sass_histogram = true;  // run cuobjdump/nvdisasm when found
};

struct LintReport {
  std::vector<KernelMetrics> kernels;  // sorted by input, then name, then arch
  std::string toolkit;                 // ptxas version ("13.0.88"), "" when ptxas was not run
  std::vector<std::string> notes;      // what could not be measured, and why
};

Result<LintReport> analyze(const LintRequest& request);

// The baseline that records this report's metrics.
Baseline make_baseline(const LintReport& report);

}  // namespace gpuemu::lint
