// gpuemu lint end to end, on real nvcc/ptxas output produced during the test run: the fixtures in
// tests/data/lint are compiled once (nvcc output is cached across test processes, see cached_ptx),
// and every register/spill/stack/shared figure is compared with the text ptxas -v prints for the
// same PTX.
#include "gpuemu/lint/lint.hpp"
#include "lint/file_util.hpp"
#include "lint_test_support.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <regex>

namespace gpuemu::lint {
namespace {

using testing::find_cuda_tool;
using testing::line_of;
using testing::lint_data_dir;
using testing::read_fixture_text;
using testing::run_ok;
namespace fs = std::filesystem;

// What `ptxas -v` printed for one entry, read with a regex independent of the lint's own parser.
struct PtxasText {
  std::int64_t registers = -1, stack = -1, spill_stores = -1, spill_loads = -1, smem = 0,
               barriers = -1;
};

std::map<std::string, PtxasText> read_ptxas_text(const std::string& text) {
  std::map<std::string, PtxasText> out;
  std::regex entry(
      R"(Compiling entry function '([^']+)' for '[^']+'\s*\n[^\n]*Function properties for [^\n]*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads\s*\n[^\n]*Used (\d+) registers, used (\d+) barriers(?:, (\d+) bytes smem)?)");
  for (std::sregex_iterator it(text.begin(), text.end(), entry), end; it != end; ++it) {
    const std::smatch& m = *it;
    out[m[1]] = PtxasText{std::stoll(m[5]),
                          std::stoll(m[2]),
                          std::stoll(m[3]),
                          std::stoll(m[4]),
                          m[7].matched ? std::stoll(m[7]) : 0,
                          std::stoll(m[6])};
  }
  return out;
}

struct CompiledFixture {
  fs::path ptx;
  std::string arch;
  std::string ptxas_text;
  LintReport report;
};

class LintEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_nvcc = find_cuda_tool("nvcc");
    s_ptxas = find_cuda_tool("ptxas");
    if (s_nvcc.empty() || s_ptxas.empty()) return;
    auto dir = TempDir::create("gpuemu-lint-test-");
    ASSERT_TRUE(dir.ok());
    s_dir = std::make_unique<TempDir>(std::move(*dir));
    for (auto [source, arch] : {std::pair{"kernels.cu", "sm_80"}, std::pair{"kernels.cu", "sm_90"},
                                std::pair{"spill.cu", "sm_90"}}) {
      CompiledFixture f;
      f.arch = arch;
      f.ptx = s_dir->path() / (fs::path(source).stem().string() + "." + arch + ".ptx");
      fs::path cached = testing::cached_ptx(s_nvcc, lint_data_dir() / source, f.arch);
      ASSERT_FALSE(cached.empty());
      fs::copy_file(cached, f.ptx);
      f.ptxas_text = run_ok({s_ptxas.string(), "-v", "-arch=" + f.arch, f.ptx.string(), "-o",
                             (s_dir->path() / (f.ptx.stem().string() + ".cubin")).string()});
      LintRequest request;
      request.inputs = {f.ptx};
      request.arches = {f.arch};
      auto report = analyze(request);
      ASSERT_TRUE(report.ok()) << report.error().message;
      f.report = std::move(*report);
      s_fixtures[std::string(source) + "@" + arch] = std::move(f);
    }
  }
  static void TearDownTestSuite() {
    s_fixtures.clear();
    s_dir.reset();
  }
  void SetUp() override {
    if (s_nvcc.empty() || s_ptxas.empty())
      GTEST_SKIP() << "nvcc/ptxas not found: the CUDA toolkit is not installed";
  }

  static const KernelMetrics& kernel(const std::string& fixture, const std::string& name) {
    for (const KernelMetrics& k : s_fixtures.at(fixture).report.kernels)
      if (k.name == name) return k;
    throw std::runtime_error("no kernel " + name + " in " + fixture);
  }

  static inline fs::path s_nvcc, s_ptxas;
  static inline std::unique_ptr<TempDir> s_dir;
  static inline std::map<std::string, CompiledFixture> s_fixtures;
};

TEST_F(LintEndToEnd, ResourcesMatchPtxasOwnText) {
  int compared = 0;
  for (const auto& [id, f] : s_fixtures) {
    auto expected = read_ptxas_text(f.ptxas_text);
    ASSERT_FALSE(expected.empty()) << id << ": regex found nothing in\n" << f.ptxas_text;
    ASSERT_EQ(f.report.kernels.size(), expected.size()) << id;
    for (const KernelMetrics& k : f.report.kernels) {
      SCOPED_TRACE(id + " " + k.name);
      ASSERT_TRUE(expected.count(k.name));
      const PtxasText& e = expected.at(k.name);
      EXPECT_EQ(k.registers, e.registers);
      EXPECT_EQ(k.spill_store_bytes, e.spill_stores);
      EXPECT_EQ(k.spill_load_bytes, e.spill_loads);
      EXPECT_EQ(k.stack_bytes, e.stack);
      EXPECT_EQ(k.shared_bytes, e.smem);
      EXPECT_EQ(k.barriers, e.barriers);
      EXPECT_EQ(k.arch, f.arch);
      // Registers, stack, shared and barriers come from the cubin's ELF, spills from ptxas.
      EXPECT_EQ(k.sources.at("registers"), "cubin");
      EXPECT_EQ(k.sources.at("spill_store_bytes"), "ptxas");
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * 8 + 1);
}

TEST_F(LintEndToEnd, SpillsAreWhatPtxasReportsNotLocalLoads) {
  const KernelMetrics& k = kernel("spill.cu@sm_90", "pressure");
  EXPECT_LE(*k.registers, 32);
  EXPECT_GT(*k.spill_store_bytes, 0);
  EXPECT_GT(*k.spill_load_bytes, 0);
  // The PTX has no ld/st.local at all: counting those (the seed's "spills") would say zero.
  EXPECT_EQ(k.mix->count(InstructionClass::ld_local), 0);
  EXPECT_EQ(k.mix->count(InstructionClass::st_local), 0);
  // Virtual registers declared in PTX are not what the hardware allocates.
  EXPECT_GT(*k.ptx_virtual_registers, 3 * *k.registers);
}

TEST_F(LintEndToEnd, InstructionMixMatchesTheKernels) {
  using C = InstructionClass;
  const std::string f = "kernels.cu@sm_90";
  const KernelMetrics& saxpy = kernel(f, "saxpy");
  EXPECT_EQ(saxpy.mix->count(C::ld_global), 2);
  EXPECT_EQ(saxpy.mix->count(C::st_global), 1);
  EXPECT_EQ(saxpy.mix->count(C::fma), 1);
  EXPECT_GE(saxpy.mix->count(C::predicated), 1);
  EXPECT_EQ(saxpy.mix->count(C::fp64), 0);
  EXPECT_GT(*saxpy.instructions, 10);
  EXPECT_EQ(*saxpy.sass_bytes % 128, 0);

  const KernelMetrics& sum = kernel(f, "block_sum");
  EXPECT_EQ(*sum.shared_bytes, 1024);
  EXPECT_EQ(*sum.barriers, 1);
  EXPECT_EQ(sum.mix->count(C::atomic), 1);
  EXPECT_GE(sum.mix->count(C::barrier), 1);
  EXPECT_GE(sum.mix->count(C::ld_shared), 1);

  EXPECT_GE(kernel(f, "fp64_axpy").mix->count(C::fp64), 1);
  EXPECT_GE(kernel(f, "fast_math").mix->count(C::sfu), 4);
  EXPECT_GE(kernel(f, "wmma_tile").mix->count(C::mma), 1);

  const KernelMetrics& local = kernel(f, "local_array");
  EXPECT_EQ(*local.local_declared_bytes, 256);
  EXPECT_EQ(*local.stack_bytes, 256);
  EXPECT_GT(local.mix->count(C::ld_local), 0);
  const KernelMetrics& promoted = kernel(f, "local_promoted");
  EXPECT_EQ(*promoted.local_declared_bytes, 128);  // declared in PTX ...
  EXPECT_EQ(*promoted.stack_bytes, 0);             // ... but kept in registers by ptxas

  const KernelMetrics& templated = kernel(f, "_Z8scale_byILi3EEvPf");
  EXPECT_EQ(templated.demangled, "void scale_by<3>(float*)");
}

TEST_F(LintEndToEnd, LineInfoPointsAtTheSource) {
  std::string source = read_fixture_text(lint_data_dir() / "kernels.cu");
  const std::string f = "kernels.cu@sm_90";
  const KernelMetrics& saxpy = kernel(f, "saxpy");
  ASSERT_TRUE(saxpy.location);
  EXPECT_EQ(fs::path(saxpy.location->file).filename(), "kernels.cu");
  EXPECT_EQ(saxpy.location->line, line_of(source, "// @saxpy"));
  EXPECT_EQ(saxpy.class_locations.at(InstructionClass::fma).line, line_of(source, "@saxpy_fma"));
  EXPECT_EQ(kernel(f, "fp64_axpy").class_locations.at(InstructionClass::fp64).line,
            line_of(source, "@fp64_fma"));
  EXPECT_EQ(kernel(f, "block_sum").class_locations.at(InstructionClass::atomic).line,
            line_of(source, "@block_sum_atomic"));
  EXPECT_EQ(kernel(f, "local_array").class_locations.at(InstructionClass::st_local).line,
            line_of(source, "@local_store"));
}

TEST_F(LintEndToEnd, CuInputCompilesPerArch) {
  LintRequest request;
  request.inputs = {lint_data_dir() / "spill.cu"};
  request.arches = {"sm_90", "80"};  // "80" is normalised to sm_80
  auto report = analyze(request);
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_EQ(report->kernels.size(), 2u);
  EXPECT_EQ(report->kernels[0].arch, "sm_80");
  EXPECT_EQ(report->kernels[1].arch, "sm_90");
  EXPECT_EQ(report->kernels[1].input_kind, "cu");
  const KernelMetrics& from_ptx = kernel("spill.cu@sm_90", "pressure");
  EXPECT_EQ(report->kernels[1].registers, from_ptx.registers);
  EXPECT_EQ(report->kernels[1].spill_store_bytes, from_ptx.spill_store_bytes);
  EXPECT_EQ(report->kernels[1].instructions, from_ptx.instructions);
  EXPECT_FALSE(report->toolkit.empty());
}

TEST_F(LintEndToEnd, CubinInputHasNoSpillFigures) {
  fs::path cubin = s_dir->path() / "kernels.sm_90.cubin";
  LintRequest request;
  request.inputs = {cubin};
  auto report = analyze(request);
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_EQ(report->kernels.size(), 8u);
  for (const KernelMetrics& k : report->kernels) {
    EXPECT_EQ(k.input_kind, "cubin");
    EXPECT_FALSE(k.spill_store_bytes) << "a cubin does not record spills";
    EXPECT_FALSE(k.mix);
    EXPECT_EQ(k.registers, kernel("kernels.cu@sm_90", k.name).registers) << k.name;
  }
  bool noted = false;
  for (const std::string& n : report->notes)
    noted |= n.find("records no spill") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST_F(LintEndToEnd, CompilerErrorsComeBackAsOneLine) {
  LintRequest request;
  request.inputs = {lint_data_dir() / "broken.cu"};
  auto report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(report.error().message.find("nvcc on "), std::string::npos) << report.error().message;
  EXPECT_NE(report.error().message.find("undefined_name"), std::string::npos)
      << report.error().message;
  EXPECT_EQ(report.error().message.find('\n'), std::string::npos);

  request.inputs = {s_fixtures.at("kernels.cu@sm_90").ptx};
  request.arches = {"sm_80"};  // PTX for sm_90 cannot be assembled for an older target
  report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message.find("ptxas on "), std::string::npos) << report.error().message;
}

TEST_F(LintEndToEnd, UnknownArchIsAClearError) {
  LintRequest request;
  request.inputs = {lint_data_dir() / "spill.cu"};
  request.arches = {"sm_91"};
  auto report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(report.error().message.rfind("unknown arch 'sm_91' (this ptxas supports ", 0), 0u)
      << report.error().message;
  request.arches = {"hopper"};
  report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().message, "unknown arch 'hopper' (expected sm_XY, e.g. sm_80 or sm_90a)");
}

TEST_F(LintEndToEnd, MutatedPtxThroughPtxasFailsCleanly) {
  std::string original = read_fixture_text(s_fixtures.at("spill.cu@sm_90").ptx);
  int accepted = 0, rejected = 0;
  for (int i = 1; i <= 8; ++i) {
    std::string mutant = original;
    if (i % 2 == 0)
      mutant.resize(original.size() * static_cast<std::size_t>(i) / 9);
    else
      mutant[original.size() * static_cast<std::size_t>(i) / 9] = '}';
    fs::path path = s_dir->path() / ("mutant" + std::to_string(i) + ".ptx");
    ASSERT_TRUE(write_file_atomically(path, mutant).ok());
    LintRequest request;
    request.inputs = {path};
    auto report = analyze(request);
    if (report.ok()) {
      ++accepted;
      continue;
    }
    ++rejected;
    EXPECT_EQ(report.error().code, ErrorCode::invalid_argument);
    EXPECT_EQ(report.error().message.rfind(path.string() + ": ", 0), 0u) << report.error().message;
    EXPECT_EQ(report.error().message.find('\n'), std::string::npos) << report.error().message;
  }
  EXPECT_GT(rejected, 4);
  (void)accepted;
}

// cuobjdump/nvdisasm ship with the toolkit on the GPU machine, not here.
TEST_F(LintEndToEnd, SassOpcodeHistogramWhenADisassemblerIsPresent) {
  if (find_cuda_tool("cuobjdump").empty() && find_cuda_tool("nvdisasm").empty())
    GTEST_SKIP() << "cuobjdump/nvdisasm not found (the GPU machine has them)";
  LintRequest request;
  request.inputs = {s_fixtures.at("kernels.cu@sm_90").ptx};
  request.arches = {"sm_90"};
  auto report = analyze(request);
  ASSERT_TRUE(report.ok()) << report.error().message;
  for (const KernelMetrics& k : report->kernels) {
    ASSERT_FALSE(k.sass_opcodes.empty()) << k.name;
    std::int64_t total =
        std::accumulate(k.sass_opcodes.begin(), k.sass_opcodes.end(), std::int64_t{0},
                        [](std::int64_t s, const auto& kv) { return s + kv.second; });
    EXPECT_EQ(total - 1, *k.instructions) << k.name << ": the listing has the final BRA self-loop";
  }
  bool has_ffma = false;
  for (const KernelMetrics& k : report->kernels)
    if (k.name == "saxpy") has_ffma = k.sass_opcodes.count("FFMA") == 1;
  EXPECT_TRUE(has_ffma);
}

TEST_F(LintEndToEnd, NotesWhenNoDisassemblerIsFound) {
  fs::path empty_dir = s_dir->path() / "only-ptxas";
  fs::create_directories(empty_dir);
  fs::create_symlink(s_ptxas, empty_dir / "ptxas");
  LintRequest request;
  request.inputs = {s_fixtures.at("spill.cu@sm_90").ptx};
  request.tool_dirs = {empty_dir};
  auto report = analyze(request);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_TRUE(report->kernels.at(0).sass_opcodes.empty());
  ASSERT_FALSE(report->notes.empty());
  EXPECT_NE(report->notes[0].find("neither cuobjdump nor nvdisasm"), std::string::npos);
}

TEST_F(LintEndToEnd, TritonCacheDirectory) {
  auto cache = lint_data_dir() / "recorded" / "triton_cache";
  LintRequest request;
  request.inputs = {cache};
  auto report = analyze(request);
  ASSERT_TRUE(report.ok()) << report.error().message;
  ASSERT_EQ(report->kernels.size(), 3u);
  std::map<std::string, std::int64_t> registers;  // from cuobjdump -res-usage on the GPU machine
  for (const KernelMetrics& k : report->kernels) {
    EXPECT_EQ(k.input_kind, "triton");
    EXPECT_EQ(k.arch, "sm_90a");
    EXPECT_EQ(k.sources.at("registers"), "cubin");
    EXPECT_TRUE(k.spill_store_bytes) << "ptxas re-assembles Triton's PTX for the spill figures";
    EXPECT_TRUE(k.mix);
    EXPECT_EQ(fs::path(k.location->file).filename(), "triton_kernels.py");
    registers[k.name + "/" + k.variant] = *k.registers;
  }
  EXPECT_EQ(registers.at("matmul_kernel/w4s3"), 208);
  // Two specialisations of add_kernel (BLOCK=1024 and 512) share name and variant: the second one
  // is told apart by an ordinal, and a note says so.
  EXPECT_EQ(registers.count("add_kernel/w4s3"), 1u);
  EXPECT_EQ(registers.count("add_kernel/w4s3#2"), 1u);
  EXPECT_EQ(registers.at("add_kernel/w4s3") + registers.at("add_kernel/w4s3#2"), 26 + 20);
  EXPECT_FALSE(report->notes.empty());
  auto matmul = std::find_if(report->kernels.begin(), report->kernels.end(),
                             [](const KernelMetrics& k) { return k.name == "matmul_kernel"; });
  EXPECT_GT(matmul->mix->count(InstructionClass::wgmma), 0);
}

// Errors that need no compiler.
TEST(LintErrors, MissingToolsInputsAndFormats) {
  auto dir = TempDir::create("gpuemu-lint-empty-");
  ASSERT_TRUE(dir.ok());
  LintRequest request;
  request.inputs = {lint_data_dir() / "kernels.cu"};
  request.tool_dirs = {dir->path()};
  auto report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ErrorCode::tool_missing);
  EXPECT_EQ(
      report.error().message.rfind("nvcc not found (searched " + dir->path().string() + ")", 0), 0u)
      << report.error().message;

  request.inputs = {lint_data_dir() / "recorded" / "triton_cache"};
  report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ErrorCode::tool_missing);
  EXPECT_NE(report.error().message.find("ptxas not found"), std::string::npos);

  // A cubin needs no tool at all.
  request.inputs = {lint_data_dir() / "recorded" / "basic_sm90.cubin"};
  report = analyze(request);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(report->kernels.size(), 3u);

  request.inputs = {lint_data_dir() / "nope.ptx"};
  report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ErrorCode::not_found);

  request.inputs = {lint_data_dir() / "recorded" / "basic_sm90.resusage.txt"};
  report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(report.error().message.find("unsupported input"), std::string::npos);

  request.inputs = {};
  report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().message, "no input files");

  request.inputs = {dir->path()};
  report = analyze(request);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message.find("no .ptx or .cubin files found"), std::string::npos);
}

}  // namespace
}  // namespace gpuemu::lint
