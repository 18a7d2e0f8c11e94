// Internal: which InstructionClasses one PTX opcode counts in.
#pragma once

#include "gpuemu/lint/metrics.hpp"

#include <cstdint>
#include <string_view>

namespace gpuemu::lint {

// A set of InstructionClass values, one bit each.
using ClassSet = std::uint32_t;

inline constexpr ClassSet class_bit(InstructionClass cls) {
  return ClassSet{1} << static_cast<int>(cls);
}

// The classes of `opcode` (the full dotted opcode, e.g. "ld.global.nc.v4.f32"), not including
// `predicated`, which depends on the guard and is the caller's to add.
ClassSet classify_opcode(std::string_view opcode);

// True for characters that may appear in a PTX opcode ("cp.async.bulk.prefetch.L2::cache_hint").
bool is_opcode_char(char c);

}  // namespace gpuemu::lint
