// Policy (gpuemu.toml [lint]), baselines, the diff's judgements and the report formats, on
// hand-made metrics (no compiler needed).
#include "gpuemu/lint/lint.hpp"
#include "lint/file_util.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>

namespace gpuemu::lint {
namespace {

using nlohmann::json;

TEST(LintPolicy, ParsesEveryKey) {
  auto policy = parse_policy(R"(
[fuzz]
seed = 3            # another command's table: ignored here

[lint]
arch = ["sm_80", "90a"]
nvcc_flags = ["-O3"]
max_registers = 128
max_shared_bytes = 49152
max_stack_bytes = 0
allow_spills = true
warn_delta_percent = 1
fail_delta_percent = 7.5
forbid = ["local_memory", "fp64"]
missing_kernel = "fail"
)",
                             "gpuemu.toml");
  ASSERT_TRUE(policy.ok()) << policy.error().message;
  EXPECT_EQ(policy->arches, (std::vector<std::string>{"sm_80", "sm_90a"}));
  EXPECT_EQ(policy->nvcc_flags, std::vector<std::string>{"-O3"});
  EXPECT_EQ(policy->max_registers, 128);
  EXPECT_EQ(policy->max_shared_bytes, 49152);
  EXPECT_EQ(policy->max_stack_bytes, 0);
  EXPECT_TRUE(policy->allow_spills);
  EXPECT_DOUBLE_EQ(policy->warn_delta_percent, 1.0);
  EXPECT_DOUBLE_EQ(policy->fail_delta_percent, 7.5);
  EXPECT_EQ(policy->forbid, (std::vector<std::string>{"local_memory", "fp64"}));
  EXPECT_EQ(policy->missing_kernel, MissingKernelAction::fail);

  auto defaults = parse_policy("[other]\nx = 1\n", "gpuemu.toml");
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(defaults->max_registers);
  EXPECT_FALSE(defaults->allow_spills);
  EXPECT_DOUBLE_EQ(defaults->warn_delta_percent, 2.0);
  EXPECT_DOUBLE_EQ(defaults->fail_delta_percent, 10.0);
}

void expect_policy_error(const std::string& toml, const std::string& message) {
  auto policy = parse_policy(toml, "gpuemu.toml");
  ASSERT_FALSE(policy.ok()) << toml;
  EXPECT_EQ(policy.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(policy.error().message.substr(0, message.size()), message) << policy.error().message;
}

TEST(LintPolicy, RejectsUnknownKeysAndBadValuesWithLineNumbers) {
  expect_policy_error(
      "[lint]\nmax_registers = 64\nmax_regs = 32\n",
      "gpuemu.toml:3: unknown key 'max_regs' in [lint] (known: allow_spills, arch,");
  expect_policy_error("[lint]\n\n[lint.kernels]\nx = 1\n",
                      "gpuemu.toml:3: unknown key 'kernels' in [lint]");
  expect_policy_error("[lint]\nmax_registers = \"64\"\n",
                      "gpuemu.toml:2: [lint].max_registers must be a non-negative integer");
  expect_policy_error("[lint]\nmax_registers = -1\n",
                      "gpuemu.toml:2: [lint].max_registers must be a non-negative integer");
  // A float past int64's range where an integer belongs: converting it was undefined (fuzz_toml).
  expect_policy_error("[lint]\nmax_registers = 1.2e49\n",
                      "gpuemu.toml:2: [lint].max_registers must be a non-negative integer");
  expect_policy_error("[lint]\nallow_spills = 1\n",
                      "gpuemu.toml:2: [lint].allow_spills must be true or false");
  expect_policy_error("[lint]\nforbid = [\"fp64\", \"lolz\"]\n",
                      "gpuemu.toml:2: [lint].forbid: unknown class 'lolz'");
  expect_policy_error("[lint]\nforbid = [\"fp64\", 3]\n",
                      "gpuemu.toml:2: [lint].forbid must be a list of strings");
  expect_policy_error("[lint]\narch = \"hopper\"\n", "gpuemu.toml:2: unknown arch 'hopper'");
  expect_policy_error("[lint]\nmissing_kernel = \"explode\"\n",
                      "gpuemu.toml:2: [lint].missing_kernel must be");
  expect_policy_error(
      "[lint]\nwarn_delta_percent = 20\nfail_delta_percent = 5\n",
      "gpuemu.toml:1: [lint].fail_delta_percent must not be below warn_delta_percent");
  expect_policy_error("lint = 3\n", "gpuemu.toml:1: [lint] must be a table");
  expect_policy_error("[lint]\nmax_registers = \n", "gpuemu.toml:2:");  // TOML syntax error
  auto missing = load_policy("/nonexistent/gpuemu.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
}

KernelMetrics metrics(const std::string& name, std::int64_t registers, std::int64_t instructions) {
  KernelMetrics k;
  k.name = k.demangled = name;
  k.arch = "sm_90";
  k.input = "k.ptx";
  k.input_kind = "ptx";
  k.registers = registers;
  k.instructions = instructions;
  k.spill_store_bytes = k.spill_load_bytes = 0;
  k.stack_bytes = k.shared_bytes = k.barriers = 0;
  k.mix = InstructionMix{};
  k.location = SourceLocation{"src/k.cu", 12, 1};
  return k;
}

const Finding* find_rule(const LintVerdict& v, const std::string& rule, const std::string& kernel) {
  for (const Finding& f : v.findings)
    if (f.rule == rule && f.kernel == kernel) return &f;
  return nullptr;
}

TEST(LintDiff, JudgesDeltasByThePolicy) {
  Baseline baseline{"13.0.88",
                    {metrics("same", 32, 100), metrics("grew", 32, 100), metrics("warned", 32, 100),
                     metrics("shrank", 32, 100), metrics("gone", 16, 10)}};
  std::vector<KernelMetrics> current = {metrics("same", 32, 100), metrics("grew", 40, 100),
                                        metrics("warned", 32, 105), metrics("shrank", 32, 80),
                                        metrics("fresh", 8, 8)};
  LintPolicy policy;  // warn 2 %, fail 10 %
  LintVerdict v = diff(baseline, current, policy);
  EXPECT_TRUE(v.failed());
  const Finding* grew = find_rule(v, "delta-registers", "grew");
  ASSERT_NE(grew, nullptr);
  EXPECT_EQ(grew->severity, Severity::error);
  EXPECT_EQ(grew->message, "registers 32 -> 40 (+25.0%) exceeds fail_delta_percent +10.0%");
  EXPECT_EQ(grew->location, (SourceLocation{"src/k.cu", 12, 1}));
  const Finding* warned = find_rule(v, "delta-instructions", "warned");
  ASSERT_NE(warned, nullptr);
  EXPECT_EQ(warned->severity, Severity::warning);
  ASSERT_NE(find_rule(v, "improved", "shrank"), nullptr);
  EXPECT_EQ(find_rule(v, "improved", "shrank")->severity, Severity::note);
  ASSERT_NE(find_rule(v, "missing-kernel", "gone"), nullptr);
  EXPECT_EQ(find_rule(v, "missing-kernel", "gone")->severity, Severity::warning);
  ASSERT_NE(find_rule(v, "new-kernel", "fresh"), nullptr);
  EXPECT_EQ(find_rule(v, "delta-registers", "same"), nullptr);
  std::map<std::string, KernelStatus> status;
  for (const KernelDiff& d : v.diffs) status[d.name] = d.status;
  EXPECT_EQ(status["same"], KernelStatus::unchanged);
  EXPECT_EQ(status["grew"], KernelStatus::changed);
  EXPECT_EQ(status["gone"], KernelStatus::removed);
  EXPECT_EQ(status["fresh"], KernelStatus::added);

  policy.missing_kernel = MissingKernelAction::fail;
  policy.fail_delta_percent = 30;
  v = diff(baseline, current, policy);
  EXPECT_EQ(find_rule(v, "delta-registers", "grew")->severity, Severity::warning);
  EXPECT_EQ(find_rule(v, "missing-kernel", "gone")->severity, Severity::error);
}

TEST(LintDiff, SpillsAndGrowthFromZero) {
  KernelMetrics before = metrics("k", 32, 100), after = metrics("k", 32, 100);
  after.spill_store_bytes = after.spill_load_bytes = 16;
  after.stack_bytes = 24;
  LintPolicy policy;
  LintReport report{{after}, "13.0.88", {}};
  Baseline baseline{"12.4.131", {before}};
  LintVerdict v = evaluate(report, &baseline, policy);
  ASSERT_NE(find_rule(v, "spills", "k"), nullptr);  // absolute: allow_spills = false
  EXPECT_EQ(find_rule(v, "spills", "k")->message,
            "spills 16 bytes stored, 16 bytes loaded (allow_spills = false)");
  ASSERT_NE(find_rule(v, "delta-stack", "k"), nullptr);  // 0 -> 24 is growth without a percentage
  EXPECT_EQ(find_rule(v, "delta-stack", "k")->severity, Severity::error);
  EXPECT_EQ(find_rule(v, "delta-spills", "k"), nullptr);  // not reported twice
  ASSERT_NE(find_rule(v, "toolkit-changed", ""), nullptr);

  policy.allow_spills = true;
  v = evaluate(report, &baseline, policy);
  EXPECT_EQ(find_rule(v, "spills", "k"), nullptr);
  ASSERT_NE(find_rule(v, "delta-spills", "k"), nullptr);
  EXPECT_EQ(find_rule(v, "delta-spills", "k")->severity, Severity::warning);
}

TEST(LintLimits, AbsoluteLimitsAndForbiddenClasses) {
  KernelMetrics k = metrics("k", 96, 100);
  k.mix->add(InstructionClass::fp64, 3);
  k.class_locations[InstructionClass::fp64] = SourceLocation{"src/k.cu", 40, 7};
  k.stack_bytes = 16;
  LintPolicy policy;
  policy.max_registers = 64;
  policy.forbid = {"fp64", "local_memory", "atomic"};
  std::vector<Finding> f = check_limits({k}, policy);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].rule, "max-registers");
  EXPECT_EQ(f[0].message, "registers 96 exceeds max_registers = 64");
  EXPECT_EQ(f[1].rule, "forbidden-class");
  EXPECT_EQ(f[1].message, "forbidden fp64: 3 PTX instructions");
  EXPECT_EQ(f[1].location, (SourceLocation{"src/k.cu", 40, 7}));
  EXPECT_NE(f[2].message.find("forbidden local memory"), std::string::npos);
  EXPECT_NE(f[2].message.find("16 bytes stack frame"), std::string::npos);

  KernelMetrics cubin_only = metrics("c", 8, 8);
  cubin_only.mix.reset();
  cubin_only.stack_bytes = 0;
  f = check_limits({cubin_only}, policy);
  ASSERT_EQ(f.size(), 2u);  // fp64 and atomic cannot be checked without PTX: notes
  EXPECT_EQ(f[0].severity, Severity::note);
}

TEST(LintBaseline, RoundTripsThroughJsonAndFiles) {
  KernelMetrics k = metrics("_Z1kv", 32, 100);
  k.demangled = "k()";
  k.variant = "w4s3";
  k.mix->add(InstructionClass::ld_global, 7);
  k.class_locations[InstructionClass::ld_global] = SourceLocation{"a.cu", 3, 0};
  k.sass_opcodes = {{"FFMA", 4}};
  k.sources = {{"registers", "cubin"}};
  k.spill_store_bytes.reset();  // unknown stays unknown
  Baseline baseline{"13.0.88", {k}};
  json j = baseline;
  EXPECT_EQ(j["format"], "gpuemu-lint-baseline");
  EXPECT_TRUE(j["kernels"][0]["spill_store_bytes"].is_null());
  auto back = baseline_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(json(*back), j);

  auto dir = TempDir::create("gpuemu-lint-baseline-");
  ASSERT_TRUE(dir.ok());
  auto path = dir->path() / "baseline.json";
  ASSERT_TRUE(save_baseline(baseline, path).ok());
  auto loaded = load_baseline(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(json(*loaded), j);

  // The --json report is accepted as a baseline too.
  LintReport report{{k}, "13.0.88", {}};
  auto from_report = baseline_from_json(report_to_json(report, LintVerdict{}));
  ASSERT_TRUE(from_report.ok()) << from_report.error().message;
  EXPECT_EQ(from_report->kernels.at(0).key(), "_Z1kv@sm_90/w4s3");
}

TEST(LintBaseline, RejectsWhatIsNotABaseline) {
  auto expect_bad = [](const json& j, const std::string& what) {
    auto b = baseline_from_json(j);
    ASSERT_FALSE(b.ok()) << j.dump();
    EXPECT_EQ(b.error().code, ErrorCode::invalid_argument);
    EXPECT_EQ(b.error().message.rfind("not a lint baseline: ", 0), 0u) << b.error().message;
    EXPECT_NE(b.error().message.find(what), std::string::npos) << b.error().message;
  };
  expect_bad(json::array(), "must be a JSON object");
  expect_bad(json{{"format", "sarif"}, {"kernels", json::array()}}, "\"format\" is neither");
  expect_bad(json{{"version", 99}, {"kernels", json::array()}}, "unsupported baseline version");
  expect_bad(json{{"kernels", 3}}, "\"kernels\" must be an array");
  expect_bad(json{{"kernels", json::array({json{{"arch", "sm_90"}}})}}, "missing \"name\"");
  expect_bad(json{{"kernels",
                   json::array({json{{"name", "k"}, {"arch", "sm_90"}, {"registers", "many"}}})}},
             "\"registers\" must be an integer or null");
  auto dir = TempDir::create("gpuemu-lint-baseline-");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(write_file_atomically(dir->path() / "bad.json", "{ not json").ok());
  auto bad = load_baseline(dir->path() / "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("invalid JSON"), std::string::npos);
  EXPECT_EQ(load_baseline(dir->path() / "absent.json").error().code, ErrorCode::not_found);
}

LintVerdict sample_verdict(LintReport& report) {
  KernelMetrics k = metrics("_Z3addPf", 40, 120);
  k.demangled = "add(float*)";
  report = LintReport{{k}, "13.0.88", {"a note"}};
  Baseline baseline{"13.0.88", {metrics("_Z3addPf", 32, 100), metrics("old", 8, 8)}};
  LintPolicy policy;
  policy.missing_kernel = MissingKernelAction::fail;
  return evaluate(report, &baseline, policy);
}

TEST(LintReportFormats, JsonHasTheDocumentedShape) {
  LintReport report;
  LintVerdict verdict = sample_verdict(report);
  json j = report_to_json(report, verdict);
  ASSERT_EQ(j["kernels"].size(), 1u);
  for (const char* key : {"name", "arch", "registers", "spill_store_bytes", "spill_load_bytes",
                          "stack_bytes", "shared_bytes", "instructions"})
    EXPECT_TRUE(j["kernels"][0].contains(key)) << key;
  EXPECT_EQ(j["verdict"], "fail");
  EXPECT_EQ(j["toolkit"], "13.0.88");
  EXPECT_TRUE(j["diff"].is_array());
  EXPECT_EQ(j["notes"][0], "a note");
  EXPECT_EQ(parse_output_format("sarif").value(), OutputFormat::sarif);
  EXPECT_EQ(parse_output_format("xml").error().message,
            "unknown format 'xml' (expected text, json, sarif or junit)");
}

TEST(LintReportFormats, SarifCarriesSourceLocations) {
  LintReport report;
  LintVerdict verdict = sample_verdict(report);
  json sarif = render_sarif(report, verdict);
  EXPECT_EQ(sarif["version"], "2.1.0");
  const json& run = sarif["runs"][0];
  EXPECT_EQ(run["tool"]["driver"]["name"], "gpuemu-lint");
  bool located = false;
  for (const json& r : run["results"]) {
    if (r["ruleId"] != "delta-registers") continue;
    EXPECT_EQ(r["level"], "error");
    const json& loc = r["locations"][0]["physicalLocation"];
    EXPECT_EQ(loc["artifactLocation"]["uri"], "src/k.cu");
    EXPECT_EQ(loc["region"]["startLine"], 12);
    located = true;
  }
  EXPECT_TRUE(located);
  // Absolute paths under the working directory are made relative to SRCROOT.
  LintVerdict located_verdict;
  std::string cwd = std::filesystem::current_path().string();
  located_verdict.findings = {
      Finding{Severity::error, "spills", "k", "sm_90", "k.ptx", "m", SourceLocation{cwd + "/deep/x.cu", 3, 0}},
      Finding{Severity::error, "spills", "k", "sm_90", "k.ptx", "m", SourceLocation{"/elsewhere/y z.cu", 4, 0}}};
  json paths = render_sarif(report, located_verdict)["runs"][0];
  EXPECT_EQ(paths["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"],
            (json{{"uri", "deep/x.cu"}, {"uriBaseId", "SRCROOT"}}));
  EXPECT_EQ(paths["results"][1]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "file:///elsewhere/y%20z.cu");
  EXPECT_EQ(paths["originalUriBaseIds"]["SRCROOT"]["uri"], "file://" + cwd + "/");
  std::set<std::string> rule_ids;
  for (const json& r : run["tool"]["driver"]["rules"]) rule_ids.insert(r["id"]);
  for (const json& r : run["results"]) EXPECT_TRUE(rule_ids.count(r["ruleId"])) << r["ruleId"];
}

TEST(LintReportFormats, JunitAndText) {
  LintReport report;
  LintVerdict verdict = sample_verdict(report);
  std::string xml = render_junit(report, verdict);
  EXPECT_NE(xml.find("<testsuites name=\"gpuemu-lint\" tests=\"2\" failures=\"2\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("name=\"add(float*)\""), std::string::npos);
  EXPECT_NE(xml.find("[delta-registers] registers 32 -&gt; 40"), std::string::npos) << xml;
  EXPECT_NE(xml.find("[missing-kernel]"), std::string::npos);
  std::string text = render_text(report, verdict);
  EXPECT_NE(text.find("add(float*)"), std::string::npos) << text;
  EXPECT_NE(text.find("FAIL: 1 kernel(s), "), std::string::npos) << text;
  EXPECT_NE(text.find("[src/k.cu:12]"), std::string::npos) << text;
}

}  // namespace
}  // namespace gpuemu::lint
