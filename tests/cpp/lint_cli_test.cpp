// `gpuemu lint` as a user runs it: flags, exit codes (0 ok, 1 regression, 2 usage/setup error),
// one-line errors. Needs the gpuemu binary in GPUEMU_BIN_DIR (skipped when it is not built), and
// only recorded cubins, so no compiler.
#include "lint/file_util.hpp"
#include "lint_test_support.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <memory>

namespace gpuemu::lint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::lint_data_dir;

class LintCli : public ::testing::Test {
 protected:
  void SetUp() override {
    m_binary = fs::path(GPUEMU_BIN_DIR) / "gpuemu";
    if (!fs::exists(m_binary)) GTEST_SKIP() << m_binary << " is not built";
    auto dir = TempDir::create("gpuemu-lint-cli-");
    ASSERT_TRUE(dir.ok());
    m_dir = std::make_unique<TempDir>(std::move(*dir));
    m_cubin = (lint_data_dir() / "recorded" / "basic_sm90.cubin").string();
  }

  ProcessResult lint(std::vector<std::string> args) {
    args.insert(args.begin(), {m_binary.string(), "lint"});
    auto r = run_process(args);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : ProcessResult{};
  }
  std::string path(const std::string& name) const { return (m_dir->path() / name).string(); }

  fs::path m_binary;
  std::unique_ptr<TempDir> m_dir;
  std::string m_cubin;
};

TEST_F(LintCli, UsageErrorsExitTwoWithOneLine) {
  auto r = lint({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "gpuemu: error: lint: no input files (give .cu, .ptx, .cubin or a directory)\n");
  r = lint({m_cubin, "--arch", "hopper"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "gpuemu: error: unknown arch 'hopper' (expected sm_XY, e.g. sm_80 or sm_90a)\n");
  r = lint({m_cubin, "--json", "--format", "sarif"});
  EXPECT_EQ(r.exit_code, 2);
  r = lint({path("missing.cubin")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "gpuemu: error: " + path("missing.cubin") + ": no such file or directory\n");
  ASSERT_TRUE(
      write_file_atomically(path("gpuemu.toml"), "[lint]\nmax_registers = 64\nmax_regs = 3\n")
          .ok());
  r = lint({m_cubin, "--config", path("gpuemu.toml")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(
      r.output.rfind("gpuemu: error: " + path("gpuemu.toml") + ":3: unknown key 'max_regs'", 0), 0u)
      << r.output;
}

TEST_F(LintCli, JsonReportAndBaselineRoundTrip) {
  // Options before the paths: --arch takes one value per occurrence, not the paths after it.
  auto r = lint({"--arch", "sm_90", "--tools-dir", path("no-tools"), m_cubin, "--json", "-o",
                 path("report.json"), "--save-baseline", path("base.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json report = json::parse(read_text_file(path("report.json")).value());
  ASSERT_EQ(report["kernels"].size(), 3u);
  EXPECT_EQ(report["kernels"][0]["arch"], "sm_90");
  EXPECT_TRUE(report["kernels"][0]["spill_store_bytes"].is_null());
  EXPECT_EQ(report["verdict"], "pass");

  r = lint({m_cubin, "--baseline", path("base.json")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 kernel(s) unchanged"), std::string::npos) << r.output;

  json base = json::parse(read_text_file(path("base.json")).value());
  for (json& k : base["kernels"]) k["registers"] = k["registers"].get<int>() / 2;  // now it "grew"
  ASSERT_TRUE(write_file_atomically(path("shrunk.json"), base.dump()).ok());
  r = lint({m_cubin, "--baseline", path("shrunk.json")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("delta-registers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FAIL"), std::string::npos);
}

TEST_F(LintCli, PolicyLimitsExitOne) {
  ASSERT_TRUE(write_file_atomically(path("gpuemu.toml"), "[lint]\nmax_registers = 16\n").ok());
  auto r = lint({m_cubin, "--config", path("gpuemu.toml"), "--format", "junit"});
  EXPECT_EQ(r.exit_code, 1);  // the spill kernel of basic_sm90 uses 80 registers
  EXPECT_NE(
      r.output.find("<failure message=\"[max-registers] registers 80 exceeds max_registers = 16\""),
      std::string::npos)
      << r.output;
}

TEST_F(LintCli, SarifDocument) {
  auto r = lint(
      {m_cubin, "--format", "sarif", "-o", path("out.sarif"), "--baseline", path("nope.json")});
  EXPECT_EQ(r.exit_code, 2);  // a missing baseline is a setup error
  r = lint({m_cubin, "--format", "sarif", "-o", path("out.sarif")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json sarif = json::parse(read_text_file(path("out.sarif")).value());
  EXPECT_EQ(sarif["version"], "2.1.0");
  EXPECT_EQ(sarif["runs"][0]["tool"]["driver"]["name"], "gpuemu-lint");
}

}  // namespace
}  // namespace gpuemu::lint
