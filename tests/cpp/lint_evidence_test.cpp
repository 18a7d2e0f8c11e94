// The claims of evidence/lint/README.md, checked on every run: on the mutation corpus in
// tests/data/lint/corpus, structural changes fail the lint and semantic bugs do not move it.
#include "gpuemu/lint/lint.hpp"
#include "lint_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace gpuemu::lint {
namespace {

using testing::find_cuda_tool;
using testing::lint_data_dir;
namespace fs = std::filesystem;

class LintEvidence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::path nvcc = find_cuda_tool("nvcc");
    if (nvcc.empty()) return;
    for (const char* variant : {"base", "wrong_constant", "flipped_mask", "off_by_one",
                                "swapped_index", "extra_load", "more_registers", "spills"}) {
      // nvcc's PTX is cached across test processes; ptxas runs every time.
      fs::path ptx = testing::cached_ptx(
          nvcc, lint_data_dir() / "corpus" / (std::string(variant) + ".cu"), "sm_90");
      ASSERT_FALSE(ptx.empty()) << variant;
      LintRequest request;
      request.inputs = {ptx};
      request.arches = {"sm_90"};
      request.sass_histogram = false;
      auto report = analyze(request);
      ASSERT_TRUE(report.ok()) << variant << ": " << report.error().message;
      s_reports[variant] = std::move(*report);
    }
  }
  static void TearDownTestSuite() { s_reports.clear(); }
  void SetUp() override {
    if (find_cuda_tool("nvcc").empty())
      GTEST_SKIP() << "nvcc not found: the CUDA toolkit is not installed";
  }

  static LintVerdict against_base(const std::string& variant) {
    Baseline base = make_baseline(s_reports.at("base"));
    return evaluate(s_reports.at(variant), &base, LintPolicy{});
  }
  static const KernelMetrics& kernel(const std::string& variant, const std::string& name) {
    for (const KernelMetrics& k : s_reports.at(variant).kernels)
      if (k.name == name) return k;
    throw std::runtime_error(variant + " has no " + name);
  }
  static bool has(const LintVerdict& v, const std::string& rule, const std::string& kernel_name) {
    for (const Finding& f : v.findings)
      if (f.rule == rule && f.kernel == kernel_name && f.severity == Severity::error) return true;
    return false;
  }

  static inline std::map<std::string, LintReport> s_reports;
};

TEST_F(LintEvidence, SemanticBugsLeaveTheMetricsNearlyIdentical) {
  for (const char* variant : {"wrong_constant", "flipped_mask", "off_by_one"}) {
    SCOPED_TRACE(variant);
    LintVerdict v = against_base(variant);
    EXPECT_EQ(v.count(Severity::error), 0);
    EXPECT_EQ(v.count(Severity::warning), 0);
    for (const KernelMetrics& k : s_reports.at(variant).kernels) {
      const KernelMetrics& b = kernel("base", k.name);
      EXPECT_EQ(k.registers, b.registers) << k.name;
      EXPECT_EQ(k.spill_store_bytes, b.spill_store_bytes) << k.name;
      EXPECT_EQ(k.shared_bytes, b.shared_bytes) << k.name;
      EXPECT_LE(std::abs(static_cast<double>(*k.instructions - *b.instructions)),
                0.01 * *b.instructions)
          << k.name;
    }
  }
  // The wrong constant and the flipped mask compile to exactly the same shape.
  for (const char* variant : {"wrong_constant", "flipped_mask"})
    for (const KernelDiff& d : against_base(variant).diffs)
      EXPECT_EQ(d.status, KernelStatus::unchanged) << variant << " " << d.key;
}

// A transposed operand is a bug that does move the metrics, in the direction of an optimisation:
// the lint sees a change, not that the result is wrong.
TEST_F(LintEvidence, SwappedIndexLooksLikeAnOptimisation) {
  const KernelMetrics& before = kernel("base", "tiled_matmul");
  const KernelMetrics& after = kernel("swapped_index", "tiled_matmul");
  EXPECT_LT(*after.instructions, *before.instructions);
  EXPECT_EQ(after.mix->count(InstructionClass::ld_shared),
            before.mix->count(InstructionClass::ld_shared));
}

TEST_F(LintEvidence, StructuralChangesFail) {
  LintVerdict extra = against_base("extra_load");
  EXPECT_TRUE(extra.failed());
  EXPECT_TRUE(has(extra, "delta-instructions", "scale_bias"));
  EXPECT_EQ(kernel("extra_load", "scale_bias").mix->count(InstructionClass::ld_global),
            kernel("base", "scale_bias").mix->count(InstructionClass::ld_global) + 1);

  LintVerdict regs = against_base("more_registers");
  EXPECT_TRUE(has(regs, "delta-registers", "scale_bias"));
  EXPECT_GE(*kernel("more_registers", "scale_bias").registers,
            2 * *kernel("base", "scale_bias").registers);

  LintVerdict spills = against_base("spills");
  EXPECT_TRUE(has(spills, "spills", "tiled_matmul"));
  EXPECT_EQ(*kernel("base", "tiled_matmul").spill_store_bytes, 0);
  EXPECT_GT(*kernel("spills", "tiled_matmul").spill_store_bytes, 0);
  EXPECT_LE(*kernel("spills", "tiled_matmul").registers, 32);
}

}  // namespace
}  // namespace gpuemu::lint
