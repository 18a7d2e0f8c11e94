// What the lint measures for one kernel on one architecture. Every field is optional where an
// input kind cannot supply it (a cubin alone carries no spill counts; a cubin alone has no PTX),
// and an absent value is `null` in JSON, never a made-up zero.
//
// Sources, in order of authority:
//  - the cubin's own ELF (`.nv.info` EIATTR records, `.text.<kernel>` size, `.nv.shared.<kernel>`):
//    registers, stack frame, static shared memory, barriers, SASS instruction count;
//  - `ptxas -v`: spill store/load bytes (the cubin does not record them), and the same register,
//    stack, shared and barrier figures when there is no cubin;
//  - the PTX text: the instruction mix by class, declared local memory, FP64 use, line info.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gpuemu::lint {

// Classes of PTX instructions the lint counts. One instruction may count in several classes
// (a predicated FP64 FMA counts in `fma`, `fp64` and `predicated`).
enum class InstructionClass : int {
  ld_global,   // ld.global, ldu.global, ld.global.nc, wmma.load ... .global
  st_global,   // st.global, wmma.store ... .global
  ld_shared,   // ld.shared(::cta|::cluster), ldmatrix
  st_shared,   // st.shared, stmatrix
  ld_local,    // ld.local: what the seed called "spills" (they are not; see spill_*_bytes)
  st_local,    // st.local
  ld_const,    // ld.const
  ld_generic,  // ld without a state space (address space resolved at run time)
  st_generic,  // st without a state space
  cp_async,    // cp.async (non-bulk): global -> shared copies
  tma,         // cp.async.bulk*, cp.reduce.async.bulk*: the tensor memory accelerator
  mma,         // mma, wmma.mma, tcgen05.mma
  wgmma,       // wgmma.mma_async (sm_90a warpgroup MMA)
  fma,         // fma.*, and mad.* on floating-point types
  sfu,         // special functions: ex2, lg2, rcp, sqrt, rsqrt, sin, cos, tanh
  cvt,         // cvt.* (not cvta, an address conversion)
  barrier,     // bar.*, barrier.*
  mbarrier,    // mbarrier.*
  branch,      // bra, brx.idx
  call,        // call
  atomic,      // atom.*, red.*
  shfl,        // shfl.sync
  fp64,        // any arithmetic or conversion on .f64 (loads, stores and moves excluded)
  predicated,  // any instruction under an @p / @!p guard
};

inline constexpr int k_instruction_class_count = static_cast<int>(InstructionClass::predicated) + 1;

// The class's JSON / policy name ("ld_global", "fp64", ...).
std::string_view instruction_class_name(InstructionClass cls);
// The class with that name, if any.
std::optional<InstructionClass> instruction_class_from_name(std::string_view name);

struct InstructionMix {
  std::array<std::int64_t, k_instruction_class_count> counts{};

  std::int64_t count(InstructionClass cls) const { return counts[static_cast<int>(cls)]; }
  void add(InstructionClass cls, std::int64_t n = 1) { counts[static_cast<int>(cls)] += n; }
  bool operator==(const InstructionMix&) const = default;
};

// A place in the kernel's source, from the PTX's `.loc`/`.file` line info (nvcc -lineinfo).
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;
  bool operator==(const SourceLocation&) const = default;
};

struct KernelMetrics {
  std::string name;        // the symbol (mangled for C++ kernels): the identity across runs
  std::string demangled;   // human-readable name; equal to name for extern "C" and Triton kernels
  std::string arch;        // "sm_90", "sm_90a", ...
  std::string input;       // the path the kernel came from
  std::string input_kind;  // "cu", "ptx", "cubin" or "triton"
  std::string variant;  // Triton specialization tag ("w4s3" = num_warps 4, num_stages 3), else ""

  // Hardware resources.
  std::optional<std::int64_t> registers;          // physical registers per thread
  std::optional<std::int64_t> spill_store_bytes;  // from ptxas -v
  std::optional<std::int64_t> spill_load_bytes;   // from ptxas -v
  std::optional<std::int64_t> stack_bytes;        // per-thread stack frame
  std::optional<std::int64_t> shared_bytes;       // static shared memory declared by the kernel
  std::optional<std::int64_t> barriers;           // named barriers used

  // SASS, from the cubin's `.text.<kernel>` section (16-byte instructions on sm_70+).
  std::optional<std::int64_t> instructions;  // without the trailing self-branch and NOP padding
  std::optional<std::int64_t> sass_bytes;    // the section's size, padding included

  // PTX, when the input had PTX.
  std::optional<std::int64_t> ptx_instructions;
  std::optional<std::int64_t> local_declared_bytes;  // `.local` declarations (__local_depot)
  // `.reg` declarations: PTX virtual registers, NOT what the hardware allocates (see registers).
  std::optional<std::int64_t> ptx_virtual_registers;
  std::optional<InstructionMix> mix;
  std::optional<SourceLocation> location;  // the kernel's first line-info location
  // The first instruction of each class present in `mix`, when the PTX has line info.
  std::map<InstructionClass, SourceLocation> class_locations;

  // SASS opcode histogram ("FFMA" -> 12); only when cuobjdump/nvdisasm were available.
  std::map<std::string, std::int64_t> sass_opcodes;

  // Where the figures came from: "registers" -> "cubin" | "ptxas", ...
  std::map<std::string, std::string> sources;

  // The key that pairs a kernel with its baseline entry: name, arch and variant.
  std::string key() const;
};

void to_json(nlohmann::json& j, const InstructionMix& mix);
void from_json(const nlohmann::json& j, InstructionMix& mix);
void to_json(nlohmann::json& j, const SourceLocation& loc);
void from_json(const nlohmann::json& j, SourceLocation& loc);
void to_json(nlohmann::json& j, const KernelMetrics& metrics);
void from_json(const nlohmann::json& j, KernelMetrics& metrics);

}  // namespace gpuemu::lint
