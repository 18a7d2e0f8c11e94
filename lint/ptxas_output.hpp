// Internal: reading the resource report that `ptxas -v` prints for every entry function.
//
//   ptxas info    : Compiling entry function '_Z5spillPKfPfi' for 'sm_90'
//   ptxas info    : Function properties for _Z5spillPKfPfi
//       256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 80 registers, used 0 barriers, 256 bytes cumulative stack size, ...
//
// "Function properties for" also appears for non-entry functions; only entries are reported.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gpuemu::lint {

struct PtxasKernelInfo {
  std::string arch;
  std::optional<std::int64_t> registers;
  std::optional<std::int64_t> barriers;
  std::optional<std::int64_t> stack_frame_bytes;
  std::optional<std::int64_t> spill_store_bytes;
  std::optional<std::int64_t> spill_load_bytes;
  std::optional<std::int64_t> shared_bytes;  // "N bytes smem" (absent from the text when 0)
};

// Entry function name -> what ptxas said about it.
std::map<std::string, PtxasKernelInfo> parse_ptxas_output(std::string_view text);

// "Cuda compilation tools, release 13.0, V13.0.88" -> "13.0.88"; "" when not found.
std::string parse_tool_version(std::string_view version_text);

}  // namespace gpuemu::lint
