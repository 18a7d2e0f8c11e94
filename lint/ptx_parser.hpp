// Internal: a tolerant, bounds-safe reader of PTX text. It does not validate PTX semantics (ptxas
// does); it finds the module's target, line-info files and functions, and counts each function's
// instructions by class. Input it cannot make sense of (an unterminated body, a statement at
// module level that is not a directive, binary bytes) is an invalid_argument error naming the line.
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/lint/metrics.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuemu::lint {

// A `.loc` position before its file index is resolved (`.file` directives may come later).
struct PtxLoc {
  int file = 0;
  int line = 0;
  int column = 0;
};

struct PtxFunction {
  std::string name;
  bool is_entry = false;
  int line = 0;                        // line of the `.entry` / `.func` header
  std::int64_t instructions = 0;       // instruction statements in the body
  std::int64_t local_bytes = 0;        // sum of `.local` declarations
  std::int64_t virtual_registers = 0;  // `.reg` declarations (NOT physical registers)
  InstructionMix mix;
  std::optional<PtxLoc> first_loc;
  std::map<InstructionClass, PtxLoc> class_locs;
};

struct PtxModule {
  std::string version;  // ".version 9.0" -> "9.0"
  std::string target;   // the first `.target` item: "sm_90a"
  std::map<int, std::string> files;
  std::vector<PtxFunction> functions;

  // The location with its file index resolved; nullopt when the index has no `.file`.
  std::optional<SourceLocation> resolve(const PtxLoc& loc) const;
};

Result<PtxModule> parse_ptx(std::string_view text);

}  // namespace gpuemu::lint
