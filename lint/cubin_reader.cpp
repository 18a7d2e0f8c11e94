#include "cubin_reader.hpp"

#include "elf_reader.hpp"
#include "file_util.hpp"

#include <map>

namespace gpuemu::lint {
namespace {

constexpr std::uint16_t k_em_cuda = 190;
constexpr std::uint32_t k_sht_cuda_info = 0x70000000;
constexpr std::uint8_t k_sto_cuda_entry = 0x10;
constexpr std::int64_t k_sm90_reserved_shared = 1024;

// EIATTR attribute codes (the toolchain's own names) and EIFMT value formats.
constexpr std::uint8_t k_eiattr_frame_size = 0x11;
constexpr std::uint8_t k_eiattr_regcount = 0x2f;
constexpr std::uint8_t k_eiattr_num_barriers = 0x4c;
constexpr std::uint8_t k_eifmt_nval = 1, k_eifmt_bval = 2, k_eifmt_hval = 3, k_eifmt_sval = 4;
constexpr std::uint8_t k_compat_arch_specific = 0x09;
constexpr std::uint32_t k_ef_cuda_accelerators = 0x800;

// Instruction words (first 64 bits, low 16 bits: opcode and an always-true predicate).
constexpr std::uint64_t k_sass_nop = 0x7918, k_sass_bra = 0x7947, k_sass_exit = 0x794d;

struct InfoRecord {
  std::uint8_t format = 0;
  std::uint8_t attribute = 0;
  std::uint32_t value = 0;                // BVAL / HVAL
  std::span<const std::uint8_t> payload;  // SVAL
};

Error cubin_error(const std::string& what) {
  return make_error(ErrorCode::invalid_argument, "malformed cubin: " + what);
}

// The records of one .nv.info / .nv.compat section; every length is checked.
Result<std::vector<InfoRecord>> info_records(const ElfSection& section) {
  std::vector<InfoRecord> records;
  std::span<const std::uint8_t> d = section.data;
  std::size_t off = 0;
  while (off < d.size()) {
    if (d.size() - off < 4) return cubin_error(std::string(section.name) + " truncated");
    InfoRecord r{d[off], d[off + 1], 0, {}};
    if (r.format == k_eifmt_sval) {
      std::size_t size = load_u16(d, off + 2);
      if (size > d.size() - off - 4)
        return cubin_error(std::string(section.name) + " record overruns the section");
      r.payload = d.subspan(off + 4, size);
      off += 4 + size;
    } else if (r.format == k_eifmt_nval || r.format == k_eifmt_bval || r.format == k_eifmt_hval) {
      r.value = r.format == k_eifmt_bval ? d[off + 2] : load_u16(d, off + 2);
      off += 4;
    } else {
      return cubin_error(std::string(section.name) + " has a record of unknown format " +
                         std::to_string(r.format));
    }
    records.push_back(r);
  }
  return records;
}

std::string_view suffix_after(std::string_view name, std::string_view prefix) {
  return name.substr(0, prefix.size()) == prefix ? name.substr(prefix.size()) : std::string_view{};
}

bool new_abi(const ElfFile& elf) {
  return elf.os_abi == 0x41 || elf.abi_version >= 8;
}

int sm_of(const ElfFile& elf) {
  return static_cast<int>(new_abi(elf) ? (elf.flags >> 8) & 0xff : elf.flags & 0xff);
}

// sm_90a and friends: EF_CUDA_ACCELERATORS in the old ABI's e_flags, `.nv.compat` attribute 0x09
// in the new ABI (whose e_flags are the same for sm_90 and sm_90a).
Result<bool> is_arch_specific(const ElfFile& elf) {
  if (!new_abi(elf)) return (elf.flags & k_ef_cuda_accelerators) != 0;
  const ElfSection* compat = elf.find_section(".nv.compat");
  if (compat == nullptr) return false;
  auto records = info_records(*compat);
  if (!records) return records.error();
  for (const InfoRecord& r : *records)
    if (r.attribute == k_compat_arch_specific && r.format == k_eifmt_bval) return r.value == 1;
  return false;
}

}  // namespace

std::int64_t count_sass_instructions(std::span<const std::uint8_t> text) {
  std::size_t n = text.size() / 16;
  auto low16 = [&](std::size_t i) { return load_u64(text, i * 16) & 0xffff; };
  while (n > 0 && load_u64(text, (n - 1) * 16) == k_sass_nop) --n;
  if (n >= 2 && low16(n - 1) == k_sass_bra && low16(n - 2) == k_sass_exit) --n;
  return static_cast<std::int64_t>(n);
}

Result<CubinInfo> read_cubin(std::span<const std::uint8_t> bytes) {
  // Another architecture's ELF is told apart before its sections are even looked at.
  if (bytes.size() >= 20 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' &&
      bytes[3] == 'F' && load_u16(bytes, 18) != k_em_cuda)
    return make_error(ErrorCode::invalid_argument,
                      "not a CUDA cubin (ELF machine " + std::to_string(load_u16(bytes, 18)) + ")");
  auto parsed = parse_elf(bytes);
  if (!parsed) return parsed.error();
  const ElfFile& elf = *parsed;
  CubinInfo info;
  info.sm = sm_of(elf);
  if (info.sm < 70) return cubin_error("unsupported SM " + std::to_string(info.sm));
  auto specific = is_arch_specific(elf);
  if (!specific) return specific.error();
  info.arch = "sm_" + std::to_string(info.sm) + (*specific ? "a" : "");

  // Module-wide (symbol index, value) attributes, and per-kernel ones keyed by kernel name.
  std::map<std::uint32_t, std::int64_t> regcount, frame;
  std::map<std::string_view, std::int64_t> barriers;
  for (const ElfSection& section : elf.sections) {
    if (section.type != k_sht_cuda_info || section.name.substr(0, 8) != ".nv.info") continue;
    auto records = info_records(section);
    if (!records) return records.error();
    std::string_view kernel = suffix_after(section.name, ".nv.info.");
    for (const InfoRecord& r : *records) {
      if (r.format == k_eifmt_sval && r.payload.size() == 8 &&
          (r.attribute == k_eiattr_regcount || r.attribute == k_eiattr_frame_size)) {
        auto& target = r.attribute == k_eiattr_regcount ? regcount : frame;
        target[load_u32(r.payload, 0)] = load_u32(r.payload, 4);
      } else if (r.attribute == k_eiattr_num_barriers && !kernel.empty()) {
        barriers[kernel] = r.value;
      }
    }
  }

  bool any_entry_flag = false;
  for (const ElfSymbol& s : elf.symbols) any_entry_flag |= (s.other & k_sto_cuda_entry) != 0;
  for (std::size_t i = 0; i < elf.symbols.size(); ++i) {
    const ElfSymbol& sym = elf.symbols[i];
    if ((sym.info & 0xf) != 2 || sym.name.empty() || sym.section >= elf.sections.size()) continue;
    std::string text_name = ".text." + std::string(sym.name);
    const ElfSection& text = elf.sections[sym.section];
    if (text.name != text_name) continue;
    bool entry = any_entry_flag ? (sym.other & k_sto_cuda_entry) != 0
                                : elf.find_section(".nv.info." + std::string(sym.name)) != nullptr;
    if (!entry) continue;
    if (text.data.size() % 16 != 0) return cubin_error(text_name + " size is not a multiple of 16");
    CubinKernel k;
    k.name = std::string(sym.name);
    auto index = static_cast<std::uint32_t>(i);
    if (auto it = regcount.find(index); it != regcount.end())
      k.registers = it->second;
    else if (text.info >> 24 != 0)
      k.registers = text.info >> 24;
    if (auto it = frame.find(index); it != frame.end()) k.frame_bytes = it->second;
    if (auto it = barriers.find(sym.name); it != barriers.end()) k.barriers = it->second;
    if (const ElfSection* shared = elf.find_section(".nv.shared." + k.name)) {
      if (shared->size > (std::uint64_t{1} << 32))
        return cubin_error(".nv.shared size implausible");
      auto size = static_cast<std::int64_t>(shared->size);
      k.shared_bytes =
          info.sm >= 90 && size >= k_sm90_reserved_shared ? size - k_sm90_reserved_shared : size;
    }
    k.sass_bytes = static_cast<std::int64_t>(text.data.size());
    k.instructions = count_sass_instructions(text.data);
    info.kernels.push_back(std::move(k));
  }
  return info;
}

Result<CubinInfo> read_cubin_file(const std::filesystem::path& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes) return bytes.error();
  auto info = read_cubin(*bytes);
  if (!info) return make_error(info.error().code, path.string() + ": " + info.error().message);
  return info;
}

}  // namespace gpuemu::lint
