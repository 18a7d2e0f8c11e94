#include "elf_reader.hpp"

#include <algorithm>

namespace gpuemu::lint {
namespace {

constexpr std::size_t k_header_size = 64;
constexpr std::size_t k_section_header_size = 64;
constexpr std::size_t k_symbol_size = 24;

Error elf_error(const std::string& what) {
  return make_error(ErrorCode::invalid_argument, "malformed cubin: " + what);
}

// True when [offset, offset + size) lies inside a buffer of `total` bytes (overflow-safe).
bool in_bounds(std::uint64_t offset, std::uint64_t size, std::size_t total) {
  return offset <= total && size <= total - offset;
}

// The NUL-terminated string at `offset` inside a string table section.
Result<std::string_view> string_at(const ElfSection& table, std::uint64_t offset) {
  if (offset >= table.data.size()) return elf_error("string offset out of range");
  auto begin = table.data.begin() + static_cast<std::ptrdiff_t>(offset);
  auto end = std::find(begin, table.data.end(), std::uint8_t{0});
  if (end == table.data.end()) return elf_error("unterminated string");
  return std::string_view(reinterpret_cast<const char*>(&*begin),
                          static_cast<std::size_t>(end - begin));
}

Status read_symbols(ElfFile& elf) {
  auto symtab = std::find_if(elf.sections.begin(), elf.sections.end(),
                             [](const ElfSection& s) { return s.type == k_sht_symtab; });
  if (symtab == elf.sections.end()) return {};
  if (symtab->link >= elf.sections.size()) return elf_error("symbol table without string table");
  const ElfSection& strtab = elf.sections[symtab->link];
  std::span<const std::uint8_t> data = symtab->data;
  for (std::size_t off = 0; off + k_symbol_size <= data.size(); off += k_symbol_size) {
    ElfSymbol sym;
    std::uint32_t name = load_u32(data, off);
    sym.info = data[off + 4];
    sym.other = data[off + 5];
    sym.section = load_u16(data, off + 6);
    sym.value = load_u64(data, off + 8);
    sym.size = load_u64(data, off + 16);
    if (name != 0) {
      auto text = string_at(strtab, name);
      if (!text) return text.error();
      sym.name = *text;
    }
    elf.symbols.push_back(std::move(sym));
  }
  return {};
}

}  // namespace

std::uint16_t load_u16(std::span<const std::uint8_t> b, std::size_t o) {
  return static_cast<std::uint16_t>(b[o] | (b[o + 1] << 8));
}
std::uint32_t load_u32(std::span<const std::uint8_t> b, std::size_t o) {
  return static_cast<std::uint32_t>(load_u16(b, o)) |
         (static_cast<std::uint32_t>(load_u16(b, o + 2)) << 16);
}
std::uint64_t load_u64(std::span<const std::uint8_t> b, std::size_t o) {
  return static_cast<std::uint64_t>(load_u32(b, o)) |
         (static_cast<std::uint64_t>(load_u32(b, o + 4)) << 32);
}

const ElfSection* ElfFile::find_section(std::string_view name) const {
  for (const ElfSection& s : sections)
    if (s.name == name) return &s;
  return nullptr;
}

Result<ElfFile> parse_elf(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < k_header_size) return elf_error("file too short for an ELF header");
  if (bytes[0] != 0x7f || bytes[1] != 'E' || bytes[2] != 'L' || bytes[3] != 'F')
    return elf_error("not an ELF file");
  if (bytes[4] != 2) return elf_error("not a 64-bit ELF file");
  if (bytes[5] != 1) return elf_error("not a little-endian ELF file");
  ElfFile elf;
  elf.os_abi = bytes[7];
  elf.abi_version = bytes[8];
  elf.machine = load_u16(bytes, 18);
  elf.flags = load_u32(bytes, 48);
  std::uint64_t shoff = load_u64(bytes, 40);
  std::uint16_t shentsize = load_u16(bytes, 58);
  std::uint16_t shnum = load_u16(bytes, 60);
  std::uint16_t shstrndx = load_u16(bytes, 62);
  if (shnum == 0) return elf_error("no section headers");
  if (shentsize != k_section_header_size) return elf_error("unexpected section header size");
  if (!in_bounds(shoff, std::uint64_t{shnum} * k_section_header_size, bytes.size()))
    return elf_error("section headers beyond the end of the file");
  if (shstrndx >= shnum) return elf_error("section name table index out of range");

  std::vector<std::uint32_t> name_offsets;
  for (std::uint16_t i = 0; i < shnum; ++i) {
    std::size_t h = static_cast<std::size_t>(shoff) + std::size_t{i} * k_section_header_size;
    ElfSection s;
    name_offsets.push_back(load_u32(bytes, h));
    s.type = load_u32(bytes, h + 4);
    s.flags = load_u64(bytes, h + 8);
    std::uint64_t offset = load_u64(bytes, h + 24);
    s.size = load_u64(bytes, h + 32);
    s.link = load_u32(bytes, h + 40);
    s.info = load_u32(bytes, h + 44);
    if (s.type != k_sht_nobits && s.type != 0) {
      if (!in_bounds(offset, s.size, bytes.size()))
        return elf_error("section " + std::to_string(i) + " extends beyond the end of the file");
      s.data = bytes.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(s.size));
    }
    elf.sections.push_back(std::move(s));
  }
  const ElfSection& names = elf.sections[shstrndx];
  for (std::size_t i = 0; i < elf.sections.size(); ++i) {
    if (i == 0 && name_offsets[i] == 0) continue;
    auto name = string_at(names, name_offsets[i]);
    if (!name) return name.error();
    elf.sections[i].name = *name;
  }
  if (Status st = read_symbols(elf); !st) return st.error();
  return elf;
}

}  // namespace gpuemu::lint
