// Internal: turning the paths a user gave into units of work. Files are taken by extension (.cu,
// .ptx, .cubin). Directories are searched recursively for .ptx and .cubin files; files sharing a
// stem in one directory are one unit, and a `<stem>.json` beside them holding Triton's metadata
// ("name", "num_warps", "num_stages", ...) makes the unit a Triton cache entry.
#pragma once

#include "gpuemu/base/error.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace gpuemu::lint {

enum class InputKind { cu, ptx, cubin, triton };
std::string input_kind_name(InputKind kind);

struct InputUnit {
  InputKind kind = InputKind::ptx;
  std::filesystem::path source;  // what the user will recognise: the .cu/.ptx/.cubin or .json
  std::filesystem::path ptx;     // empty when none
  std::filesystem::path cubin;   // empty when none
  std::string kernel_name;       // Triton: the kernel's name from its metadata
  std::string variant;           // Triton: "w4s3" (num_warps, num_stages[, num_ctas])
};

// not_found for a missing path, invalid_argument for an unsupported file or an empty directory.
Result<std::vector<InputUnit>> discover_inputs(const std::vector<std::filesystem::path>& paths);

}  // namespace gpuemu::lint
