// Internal: what a CUDA cubin says about its kernels, read from the ELF without cuobjdump.
//
// Found by experiment on CUDA 13.0 cubins (sm_80 ... sm_120) and on Triton 3.6's (CUDA 12.8
// ptxas, the older ELF ABI), see docs/lint.md:
//  - ELF header: machine 190 (EM_CUDA); OS/ABI 0x41 with ABI version 8 puts the SM number in
//    e_flags bits 8-15 and marks sm_90a-style targets with `.nv.compat` attribute 0x09 = 1; the
//    older OS/ABI 0x33, ABI 7 puts the SM in bits 0-7 and the "a" in EF_CUDA_ACCELERATORS (0x800).
//  - `.nv.info` (module-wide): EIATTR_REGCOUNT (0x2f), EIATTR_FRAME_SIZE (0x11),
//    EIATTR_MIN_STACK_SIZE (0x12), EIATTR_MAX_STACK_SIZE (0x23) as (symbol index, value) pairs.
//  - `.nv.info.<kernel>`: EIATTR_NUM_BARRIERS (0x4c; absent when the kernel uses none).
//  - `.text.<kernel>` sh_info carries the register count in bits 24-31 on sm_8x only (0 on sm_90+).
//  - `.nv.shared.<kernel>` (NOBITS) size includes the 1 KiB per-CTA reserve on sm_90 and newer.
//  - Spill byte counts are not recorded anywhere in the cubin.
#pragma once

#include "gpuemu/base/error.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gpuemu::lint {

struct CubinKernel {
  std::string name;
  std::optional<std::int64_t> registers;
  std::optional<std::int64_t> frame_bytes;  // EIATTR_FRAME_SIZE: the per-thread stack frame
  std::int64_t barriers = 0;
  std::int64_t shared_bytes = 0;  // static shared, the sm_90+ reserve removed
  std::int64_t sass_bytes = 0;    // size of .text.<kernel>
  std::int64_t instructions = 0;  // 16-byte instructions, trailing self-branch and NOPs removed
};

struct CubinInfo {
  int sm = 0;
  std::string arch;  // "sm_90", "sm_90a"
  std::vector<CubinKernel> kernels;
};

// Errors: invalid_argument ("malformed cubin: ...", "not a CUDA cubin ...").
Result<CubinInfo> read_cubin(std::span<const std::uint8_t> bytes);
Result<CubinInfo> read_cubin_file(const std::filesystem::path& path);

// The number of real instructions in a sm_70+ text section: size / 16, minus the trailing NOP
// padding and the `BRA self` that follows the final EXIT.
std::int64_t count_sass_instructions(std::span<const std::uint8_t> text);

}  // namespace gpuemu::lint
