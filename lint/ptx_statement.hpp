// Internal: the small pieces of PTX syntax the scanner needs, each parsed without assumptions
// about well-formedness (everything is bounds-checked; numbers are range-checked).
#pragma once

#include "gpuemu/base/error.hpp"
#include "ptx_parser.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace gpuemu::lint {

// One `;`-terminated statement of a function body, labels already removed.
struct PtxStatement {
  enum class Kind { instruction, reg_decl, local_decl, other_directive };
  Kind kind = Kind::other_directive;
  std::string opcode;       // instruction: "ld.global.nc.v4.f32"
  bool predicated = false;  // instruction under @p / @!p
  std::int64_t count = 0;   // reg_decl: registers declared
  std::int64_t bytes = 0;   // local_decl: bytes declared
};

struct FunctionHeader {
  std::string name;
  bool is_entry = false;
};

// The first whitespace-delimited token ("" when none).
std::string_view first_token(std::string_view text);
// True when `text` (trimmed) is a single PTX identifier, i.e. a label before ':'.
bool is_label(std::string_view text);
// True when module-level text declares a function (`.entry` or `.func` token).
bool is_function_header(std::string_view text);
std::optional<FunctionHeader> parse_function_header(std::string_view text);
// `.file` operands: `1 "path"[, timestamp, size]`.
std::optional<std::pair<int, std::string>> parse_file_directive(std::string_view rest);
// `.loc` operands: `file line column[, function_name f, inlined_at file line column]`; when
// `inlined_at` is present its position (the call site in the caller) is returned.
std::optional<PtxLoc> parse_loc_directive(std::string_view rest);
// A body statement; errors are invalid_argument with a short description (no line number).
Result<PtxStatement> parse_body_statement(std::string_view statement);

}  // namespace gpuemu::lint
