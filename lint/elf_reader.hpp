// Internal: a minimal, fully bounds-checked reader of 64-bit little-endian ELF files (what CUDA
// cubins are). Every offset, size, index and string is checked against the file before use, so a
// truncated or corrupted file is an invalid_argument error, never an out-of-bounds read.
#pragma once

#include "gpuemu/base/error.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpuemu::lint {

inline constexpr std::uint32_t k_sht_symtab = 2;
inline constexpr std::uint32_t k_sht_nobits = 8;

struct ElfSection {
  std::string_view name;  // into the parsed buffer
  std::uint32_t type = 0;
  std::uint64_t flags = 0;
  std::uint64_t size = 0;  // for NOBITS: the size it occupies in memory
  std::uint32_t link = 0;
  std::uint32_t info = 0;
  std::span<const std::uint8_t> data;  // into the parsed buffer; empty for NOBITS
};

struct ElfSymbol {
  std::string_view name;   // into the parsed buffer
  std::uint8_t info = 0;   // binding << 4 | type
  std::uint8_t other = 0;  // visibility, and CUDA's STO_CUDA_* bits
  std::uint16_t section = 0;
  std::uint64_t value = 0;
  std::uint64_t size = 0;
};

struct ElfFile {
  std::uint8_t os_abi = 0;
  std::uint8_t abi_version = 0;
  std::uint16_t machine = 0;
  std::uint32_t flags = 0;
  std::vector<ElfSection> sections;
  std::vector<ElfSymbol> symbols;  // from the first SHT_SYMTAB; index 0 is the null symbol

  // The section with that exact name, or nullptr.
  const ElfSection* find_section(std::string_view name) const;
};

// The result borrows `bytes` (names and section data are views into it): keep it alive.
Result<ElfFile> parse_elf(std::span<const std::uint8_t> bytes);

// Little-endian loads from a byte span; callers check `offset + N <= bytes.size()` first.
std::uint16_t load_u16(std::span<const std::uint8_t> bytes, std::size_t offset);
std::uint32_t load_u32(std::span<const std::uint8_t> bytes, std::size_t offset);
std::uint64_t load_u64(std::span<const std::uint8_t> bytes, std::size_t offset);

}  // namespace gpuemu::lint
