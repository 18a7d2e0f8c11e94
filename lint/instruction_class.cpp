#include "instruction_class.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace gpuemu::lint {
namespace {

constexpr std::array<std::string_view, k_instruction_class_count> k_class_names = {
    "ld_global", "st_global",  "ld_shared",  "st_shared", "ld_local", "st_local",
    "ld_const",  "ld_generic", "st_generic", "cp_async",  "tma",      "mma",
    "wgmma",     "fma",        "sfu",        "cvt",       "barrier",  "mbarrier",
    "branch",    "call",       "atomic",     "shfl",      "fp64",     "predicated",
};

constexpr std::array<std::string_view, 8> k_special_functions = {"ex2",   "lg2", "rcp", "sqrt",
                                                                 "rsqrt", "sin", "cos", "tanh"};

// Opcodes that only move data: a `.f64` on them is not FP64 arithmetic.
constexpr std::array<std::string_view, 7> k_data_movement = {"ld",   "ldu", "st",  "mov",
                                                             "prmt", "cp",  "shfl"};

std::vector<std::string_view> split_dots(std::string_view opcode) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start <= opcode.size()) {
    std::size_t dot = opcode.find('.', start);
    if (dot == std::string_view::npos) dot = opcode.size();
    parts.push_back(opcode.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

bool has_part(const std::vector<std::string_view>& parts, std::string_view part) {
  return std::find(parts.begin() + 1, parts.end(), part) != parts.end();
}

bool has_shared_part(const std::vector<std::string_view>& parts) {
  return std::any_of(parts.begin() + 1, parts.end(),
                     [](std::string_view p) { return p.substr(0, 6) == "shared"; });
}

bool has_float_type(const std::vector<std::string_view>& parts) {
  for (std::string_view t : {"f16", "f16x2", "bf16", "bf16x2", "f32", "f64"})
    if (has_part(parts, t)) return true;
  return false;
}

// ld/st and the matrix load/stores: classify by state space.
ClassSet memory_class(const std::vector<std::string_view>& parts, bool is_load) {
  if (has_part(parts, "param")) return 0;
  if (has_part(parts, "global"))
    return class_bit(is_load ? InstructionClass::ld_global : InstructionClass::st_global);
  if (has_shared_part(parts))
    return class_bit(is_load ? InstructionClass::ld_shared : InstructionClass::st_shared);
  if (has_part(parts, "local"))
    return class_bit(is_load ? InstructionClass::ld_local : InstructionClass::st_local);
  if (has_part(parts, "const")) return is_load ? class_bit(InstructionClass::ld_const) : 0;
  return class_bit(is_load ? InstructionClass::ld_generic : InstructionClass::st_generic);
}

ClassSet primary_class(const std::vector<std::string_view>& parts) {
  std::string_view base = parts[0];
  std::string_view second = parts.size() > 1 ? parts[1] : std::string_view{};
  std::string_view third = parts.size() > 2 ? parts[2] : std::string_view{};
  if (base == "ld" || base == "ldu") return memory_class(parts, true);
  if (base == "st") return memory_class(parts, false);
  if (base == "ldmatrix") return class_bit(InstructionClass::ld_shared);
  if (base == "stmatrix") return class_bit(InstructionClass::st_shared);
  if (base == "wmma") {
    if (second == "load") return memory_class(parts, true);
    if (second == "store") return memory_class(parts, false);
    if (second == "mma") return class_bit(InstructionClass::mma);
    return 0;
  }
  if (base == "mma") return class_bit(InstructionClass::mma);
  if (base == "tcgen05" && second == "mma") return class_bit(InstructionClass::mma);
  if (base == "wgmma" && second == "mma_async") return class_bit(InstructionClass::wgmma);
  if (base == "cp" && second == "async") {
    if (third == "bulk") {
      std::string_view fourth = parts.size() > 3 ? parts[3] : std::string_view{};
      if (fourth == "commit_group" || fourth == "wait_group") return 0;
      return class_bit(InstructionClass::tma);
    }
    if (third == "ca" || third == "cg") return class_bit(InstructionClass::cp_async);
    return 0;
  }
  if (base == "cp" && second == "reduce") return class_bit(InstructionClass::tma);
  if (base == "fma") return class_bit(InstructionClass::fma);
  if (base == "mad" && has_float_type(parts)) return class_bit(InstructionClass::fma);
  if (std::find(k_special_functions.begin(), k_special_functions.end(), base) !=
      k_special_functions.end())
    return class_bit(InstructionClass::sfu);
  if (base == "cvt") return class_bit(InstructionClass::cvt);
  if (base == "bar" || base == "barrier") return class_bit(InstructionClass::barrier);
  if (base == "mbarrier") return class_bit(InstructionClass::mbarrier);
  if (base == "bra" || base == "brx") return class_bit(InstructionClass::branch);
  if (base == "call") return class_bit(InstructionClass::call);
  if (base == "atom" || base == "red") return class_bit(InstructionClass::atomic);
  if (base == "shfl") return class_bit(InstructionClass::shfl);
  return 0;
}

}  // namespace

std::string_view instruction_class_name(InstructionClass cls) {
  int index = static_cast<int>(cls);
  if (index < 0 || index >= k_instruction_class_count) return "unknown";
  return k_class_names[static_cast<std::size_t>(index)];
}

std::optional<InstructionClass> instruction_class_from_name(std::string_view name) {
  for (int i = 0; i < k_instruction_class_count; ++i)
    if (k_class_names[static_cast<std::size_t>(i)] == name) return static_cast<InstructionClass>(i);
  return std::nullopt;
}

bool is_opcode_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':';
}

ClassSet classify_opcode(std::string_view opcode) {
  std::vector<std::string_view> parts = split_dots(opcode);
  ClassSet classes = primary_class(parts);
  bool moves_data =
      std::find(k_data_movement.begin(), k_data_movement.end(), parts[0]) != k_data_movement.end();
  if (!moves_data && has_part(parts, "f64")) classes |= class_bit(InstructionClass::fp64);
  return classes;
}

}  // namespace gpuemu::lint
