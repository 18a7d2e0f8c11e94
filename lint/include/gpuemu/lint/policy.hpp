// The lint policy: the `[lint]` table of a project's gpuemu.toml. Other tables belong to other
// gpuemu commands and are ignored here; inside `[lint]`, an unknown key is an error that names the
// key and its line, so a misspelt limit never silently turns a gate off.
//
//   [lint]
//   arch = ["sm_80", "sm_90"]       # targets for .cu inputs (and .ptx when given)
//   nvcc_flags = ["-O3", "-Iinclude"]
//   max_registers = 128            # absolute limits, checked with or without a baseline
//   max_shared_bytes = 49152
//   max_stack_bytes = 0
//   allow_spills = false           # any spill store/load fails
//   warn_delta_percent = 2.0       # growth vs the baseline of instructions, registers,
//   fail_delta_percent = 10.0      #   shared and stack bytes
//   forbid = ["local_memory", "fp64"]
//   missing_kernel = "warn"        # a baseline kernel absent now: "ignore" | "warn" | "fail"
#pragma once

#include "gpuemu/base/error.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuemu::lint {

enum class MissingKernelAction { ignore, warn, fail };

// The forbidden "class" that is not a PTX instruction class: any local memory at all (ld/st.local,
// `.local` declarations, a stack frame, spills).
inline constexpr std::string_view k_forbid_local_memory = "local_memory";

struct LintPolicy {
  std::vector<std::string> arches;
  std::vector<std::string> nvcc_flags;
  std::optional<std::int64_t> max_registers;
  std::optional<std::int64_t> max_shared_bytes;
  std::optional<std::int64_t> max_stack_bytes;
  bool allow_spills = false;
  double warn_delta_percent = 2.0;
  double fail_delta_percent = 10.0;
  std::vector<std::string> forbid;  // "local_memory" or an InstructionClass name ("fp64", ...)
  MissingKernelAction missing_kernel = MissingKernelAction::warn;
};

// Parses TOML text; `source_name` is used in messages ("gpuemu.toml:7: unknown key ...").
// Errors are invalid_argument.
Result<LintPolicy> parse_policy(std::string_view toml_text, const std::string& source_name);
// Reads and parses a file: io_error / not_found when it cannot be read.
Result<LintPolicy> load_policy(const std::filesystem::path& path);

}  // namespace gpuemu::lint
