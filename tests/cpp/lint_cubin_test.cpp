// The cubin reader against the toolkit's own tools: cubins and cuobjdump/nvdisasm output recorded
// on the GPU machine (tests/data/lint/recorded/README.md), plus a fuzz over corrupted cubins.
#include "lint/cubin_reader.hpp"
#include "lint/elf_reader.hpp"
#include "lint/sass_listing.hpp"
#include "lint_test_support.hpp"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <regex>

namespace gpuemu::lint {
namespace {

using testing::lint_data_dir;
using testing::read_fixture_bytes;
using testing::read_fixture_text;

std::filesystem::path recorded(const std::string& name) {
  return lint_data_dir() / "recorded" / name;
}

struct ResourceUsage {
  std::int64_t reg = -1, stack = -1, shared = -1;
};

// `cuobjdump -res-usage`: " Function NAME:\n  REG:80 STACK:256 SHARED:2048 LOCAL:0 ...".
std::map<std::string, ResourceUsage> parse_res_usage(const std::string& text) {
  std::map<std::string, ResourceUsage> out;
  std::regex function(R"(Function ([^:\s]+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+))");
  for (std::sregex_iterator it(text.begin(), text.end(), function), end; it != end; ++it)
    out[(*it)[1]] = ResourceUsage{std::stoll((*it)[2]), std::stoll((*it)[3]), std::stoll((*it)[4])};
  return out;
}

const CubinKernel* kernel(const CubinInfo& info, const std::string& name) {
  for (const CubinKernel& k : info.kernels)
    if (k.name == name) return &k;
  return nullptr;
}

std::int64_t total(const OpcodeHistogram& h) {
  return std::accumulate(h.begin(), h.end(), std::int64_t{0},
                         [](std::int64_t s, const auto& kv) { return s + kv.second; });
}

// Checks the reader against cuobjdump -res-usage: registers, stack, and shared (which cuobjdump
// reports including the 1 KiB sm_90 reserve, when the kernel has a shared section at all).
void expect_matches_res_usage(const std::filesystem::path& cubin,
                              const std::filesystem::path& usage, std::size_t expected_kernels) {
  auto info = read_cubin_file(cubin);
  ASSERT_TRUE(info.ok()) << info.error().message;
  auto expected = parse_res_usage(read_fixture_text(usage));
  ASSERT_EQ(expected.size(), expected_kernels);
  ASSERT_EQ(info->kernels.size(), expected_kernels);
  for (const auto& [name, usage_row] : expected) {
    const CubinKernel* k = kernel(*info, name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->registers, usage_row.reg) << name;
    EXPECT_EQ(k->frame_bytes.value_or(-1), usage_row.stack) << name;
    EXPECT_EQ(k->shared_bytes,
              usage_row.shared >= 1024 ? usage_row.shared - 1024 : usage_row.shared)
        << name;
  }
}

TEST(LintCubinReader, MatchesCuobjdumpResourceUsage) {
  expect_matches_res_usage(recorded("basic_sm90.cubin"), recorded("basic_sm90.resusage.txt"), 3);
  expect_matches_res_usage(recorded("spill_sm90.cubin"), recorded("spill_sm90.resusage.txt"), 1);
  auto cache = lint_data_dir() / "recorded" / "triton_cache";
  expect_matches_res_usage(
      cache / "ABIGZCHROZWI4QLRNI7TE3T3KBC6UD6GWQ73HKM5I75BV5H4X7WQ/add_kernel.cubin",
      recorded("triton_add_ABIG.resusage.txt"), 1);
  expect_matches_res_usage(
      cache / "BFJATMRALJC3EKHZLPJIM5NUB2J744BL64R5MTZH65VEG37EOUCQ/add_kernel.cubin",
      recorded("triton_add_BFJ.resusage.txt"), 1);
  expect_matches_res_usage(
      cache / "EYO3UHXTZDN3YQAK2L5DG4RFG3GLLOKOTPXYFQZXVZE5N33SBSHA/matmul_kernel.cubin",
      recorded("triton_matmul.resusage.txt"), 1);
}

TEST(LintCubinReader, ReadsArchAndBarriers) {
  auto basic = read_cubin_file(recorded("basic_sm90.cubin"));
  ASSERT_TRUE(basic.ok());
  EXPECT_EQ(basic->sm, 90);
  EXPECT_EQ(basic->arch, "sm_90");
  EXPECT_EQ(kernel(*basic, "_Z6reducePKfPfi")->barriers, 1);  // __syncthreads
  EXPECT_EQ(kernel(*basic, "_Z5saxpyfPKfPfi")->barriers, 0);
  // Triton targets sm_90a on an H200; cuobjdump's listing says "code for sm_90a" too. Triton 3.6
  // bundles a CUDA 12.8 ptxas, whose cubins use the older ELF ABI (OS/ABI 0x33).
  auto triton =
      read_cubin_file(lint_data_dir() / "recorded" / "triton_cache" /
                      "EYO3UHXTZDN3YQAK2L5DG4RFG3GLLOKOTPXYFQZXVZE5N33SBSHA/matmul_kernel.cubin");
  ASSERT_TRUE(triton.ok());
  EXPECT_EQ(triton->arch, "sm_90a");
  EXPECT_EQ(triton->sm, 90);
  EXPECT_NE(read_fixture_text(recorded("triton_add_ABIG.cuobjdump.txt")).find("code for sm_90a"),
            std::string::npos);
}

// The instruction count from the ELF equals the disassembler's listing, minus the final `BRA self`
// (the listing parser already drops NOPs).
TEST(LintCubinReader, InstructionCountMatchesDisassembly) {
  auto basic = read_cubin_file(recorded("basic_sm90.cubin"));
  ASSERT_TRUE(basic.ok());
  auto nvdisasm =
      parse_sass_listing(read_fixture_text(recorded("basic_sm90.nvdisasm-excerpt.txt")));
  ASSERT_EQ(nvdisasm.size(), 2u);  // the excerpt holds reduce and saxpy
  for (const auto& [name, histogram] : nvdisasm) {
    const CubinKernel* k = kernel(*basic, name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->instructions, total(histogram) - 1) << name;
    EXPECT_GT(k->sass_bytes, k->instructions * 16) << name << ": padding is included in sass_bytes";
  }
  EXPECT_EQ(nvdisasm["_Z5saxpyfPKfPfi"]["LDG"], 2);
  EXPECT_EQ(nvdisasm["_Z5saxpyfPKfPfi"]["STG"], 1);
  EXPECT_EQ(nvdisasm["_Z5saxpyfPKfPfi"]["FFMA"], 1);
  EXPECT_EQ(nvdisasm["_Z6reducePKfPfi"]["BAR"], 9);

  auto add =
      read_cubin_file(lint_data_dir() / "recorded" / "triton_cache" /
                      "ABIGZCHROZWI4QLRNI7TE3T3KBC6UD6GWQ73HKM5I75BV5H4X7WQ/add_kernel.cubin");
  ASSERT_TRUE(add.ok());
  std::string listing = read_fixture_text(recorded("triton_add_ABIG.cuobjdump.txt"));
  auto cuobjdump = parse_sass_listing(listing);
  ASSERT_EQ(cuobjdump.count("add_kernel"), 1u);
  EXPECT_EQ(add->kernels.at(0).instructions, total(cuobjdump["add_kernel"]) - 1);
  // Every 16-byte slot, NOPs included, is one "/*addr*/ OPCODE" line of the listing.
  std::regex slot(R"(/\*[0-9a-f]{4}\*/\s+(@!?U?P\w+\s+)?[A-Z])");
  auto slots = std::distance(std::sregex_iterator(listing.begin(), listing.end(), slot),
                             std::sregex_iterator());
  EXPECT_EQ(add->kernels.at(0).sass_bytes, slots * 16);
}

TEST(LintCubinReader, CountsInstructionsWithoutPadding) {
  std::vector<std::uint8_t> text(16 * 6, 0);
  auto put = [&](std::size_t slot, std::uint64_t low) {
    for (int b = 0; b < 8; ++b)
      text[slot * 16 + static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(low >> (8 * b));
  };
  put(0, 0x00000a00ff017b82);                      // LDC
  put(1, 0x000000000000794d);                      // EXIT
  put(2, 0xfffffffc00fc7947);                      // BRA self
  put(3, 0x7918), put(4, 0x7918), put(5, 0x7918);  // NOP padding
  EXPECT_EQ(count_sass_instructions(text), 2);
  EXPECT_EQ(count_sass_instructions({}), 0);
}

TEST(LintCubinReader, ReadsTheOlderAbiHeader) {
  // CUDA 12 and older: OS/ABI 0x33, ABI version 7, SM number in e_flags bits 0-7.
  std::vector<std::uint8_t> bytes = read_fixture_bytes(recorded("basic_sm90.cubin"));
  ASSERT_GT(bytes.size(), 64u);
  bytes[7] = 0x33, bytes[8] = 7;
  bytes[48] = 90, bytes[49] = 0, bytes[50] = 0, bytes[51] = 0;
  auto info = read_cubin(bytes);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->sm, 90);
}

TEST(LintCubinReader, RejectsWhatIsNotACubin) {
  std::vector<std::uint8_t> host = read_fixture_bytes("/proc/self/exe");  // an x86-64 ELF
  host.resize(std::min<std::size_t>(host.size(), 4096));
  auto info = read_cubin(host);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(info.error().message, "not a CUDA cubin (ELF machine 62)");
  std::string ptx = ".version 8.0\n";
  auto text = read_cubin(std::span(reinterpret_cast<const std::uint8_t*>(ptx.data()), ptx.size()));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().message, "malformed cubin: file too short for an ELF header");
  auto missing = read_cubin_file(lint_data_dir() / "no-such.cubin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
}

void expect_clean(const std::vector<std::uint8_t>& bytes, int& accepted, int& rejected) {
  auto info = read_cubin(bytes);
  if (info.ok()) {
    ++accepted;
    for (const CubinKernel& k : info->kernels) EXPECT_GE(k.instructions, 0);
    return;
  }
  ++rejected;
  EXPECT_EQ(info.error().code, ErrorCode::invalid_argument);
  const std::string& m = info.error().message;
  EXPECT_TRUE(m.rfind("malformed cubin: ", 0) == 0 || m.rfind("not a CUDA cubin", 0) == 0) << m;
}

TEST(LintCubinFuzz, CorruptedCubinsParseOrFailCleanly) {
  int accepted = 0, rejected = 0;
  std::mt19937 rng(7);
  for (const auto& path :
       {recorded("basic_sm90.cubin"),
        lint_data_dir() / "recorded" / "triton_cache" /
            "EYO3UHXTZDN3YQAK2L5DG4RFG3GLLOKOTPXYFQZXVZE5N33SBSHA/matmul_kernel.cubin"}) {
    const std::vector<std::uint8_t> original = read_fixture_bytes(path);
    ASSERT_GT(original.size(), 1024u);
    for (std::size_t n = 0; n < original.size(); n += n < 128 ? 1 : 97)  // truncations
      expect_clean(std::vector<std::uint8_t>(original.begin(),
                                             original.begin() + static_cast<std::ptrdiff_t>(n)),
                   accepted, rejected);
    auto elf = parse_elf(original);
    ASSERT_TRUE(elf.ok());
    std::size_t shoff = static_cast<std::size_t>(load_u64(original, 40));
    for (std::size_t i = 0; i < elf->sections.size(); ++i) {  // each header field made absurd
      for (std::size_t field : {24u, 32u, 40u, 44u, 0u}) {
        std::vector<std::uint8_t> bytes = original;
        std::size_t at = shoff + i * 64 + field;
        for (std::size_t b = 0; b < (field < 40 ? 8u : 4u); ++b) bytes[at + b] = 0xff;
        expect_clean(bytes, accepted, rejected);
      }
    }
    for (int i = 0; i < 600; ++i) {  // random flips, half of them in the headers
      std::vector<std::uint8_t> bytes = original;
      int flips = 1 + static_cast<int>(rng() % 6);
      for (int f = 0; f < flips; ++f) {
        std::size_t at = i % 2 == 0
                             ? rng() % bytes.size()
                             : (rng() % 2 ? rng() % 64 : shoff + rng() % (bytes.size() - shoff));
        bytes[at] = static_cast<std::uint8_t>(rng() % 256);
      }
      expect_clean(bytes, accepted, rejected);
    }
    for (const ElfSection& s : elf->sections) {  // .nv.info records with lying lengths
      if (s.name.substr(0, 8) != ".nv.info" || s.data.size() < 4) continue;
      std::vector<std::uint8_t> bytes = original;
      std::size_t offset = static_cast<std::size_t>(s.data.data() - original.data());
      bytes[offset] = 4, bytes[offset + 2] = 0xff, bytes[offset + 3] = 0xff;
      expect_clean(bytes, accepted, rejected);
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace gpuemu::lint
