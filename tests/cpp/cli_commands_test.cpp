// The CLI's commands called as functions: an options struct in, output on a stream, an exit code
// back; no argv is parsed. Against the real catalogue, the real engine and a real daemon in a
// temporary GPUEMU_HOME (started by the command itself, as `gpuemu ci` does).
#include "cmd_daemon.hpp"
#include "cmd_failures.hpp"
#include "cmd_fuzz.hpp"
#include "cmd_ops.hpp"
#include "cmd_project.hpp"

#include <gpuemu/base/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace gpuemu::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

TEST(CliCommands, OpsListPrintsEveryOpAsJsonAndText) {
  std::ostringstream json_out, text_out;
  EXPECT_EQ(run_ops_list({.json = true}, json_out), k_exit_ok);
  const Json ops = Json::parse(json_out.str());
  ASSERT_TRUE(ops.is_array());
  ASSERT_GT(ops.size(), 10u);
  bool softmax = false;
  for (const auto& op : ops)
    if (op.at("name") == "softmax") {
      softmax = true;
      EXPECT_FALSE(op.at("family").get<std::string>().empty());
      EXPECT_NE(op.at("source").get<std::string>().find("softmax"), std::string::npos);
    }
  EXPECT_TRUE(softmax);
  EXPECT_EQ(run_ops_list({}, text_out), k_exit_ok);
  // One line per op, each starting with its name.
  std::istringstream lines(text_out.str());
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.rfind(ops[n].at("name").get<std::string>(), 0), 0u) << line;
    ++n;
  }
  EXPECT_EQ(n, ops.size());
}

TEST(CliCommands, OpsShowPrintsTheSchemaAndRefusesAnUnknownOp) {
  std::ostringstream out;
  EXPECT_EQ(run_ops_show({.op = "softmax"}, out), k_exit_ok);
  EXPECT_EQ(out.str().rfind("softmax (v", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("  inputs:\n"), std::string::npos);
  EXPECT_NE(out.str().find("  reference: "), std::string::npos);
  std::ostringstream json_out;
  EXPECT_EQ(run_ops_show({.op = "softmax", .json = true}, json_out), k_exit_ok);
  EXPECT_EQ(Json::parse(json_out.str()).at("name"), "softmax");
  std::ostringstream none;
  try {
    run_ops_show({.op = "softmx"}, none);
    FAIL() << "an unknown op was shown";
  } catch (const GpuemuException& e) {
    EXPECT_NE(e.error().message.find("unknown op 'softmx'"), std::string::npos)
        << e.error().message;
  }
  EXPECT_TRUE(none.str().empty());
}

TEST(CliCommands, CasesAreTheSameForTheSameSeed) {
  CasesOptions o;
  o.op = "softmax";
  o.seed = 3;
  o.count = 3;
  o.json = true;
  std::ostringstream a, b, c;
  EXPECT_EQ(run_cases(o, a), k_exit_ok);
  EXPECT_EQ(run_cases(o, b), k_exit_ok);
  o.seed = 4;
  EXPECT_EQ(run_cases(o, c), k_exit_ok);
  const Json cases = Json::parse(a.str());
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_TRUE(cases[0].contains("inputs"));
  EXPECT_EQ(a.str(), b.str());
  EXPECT_NE(a.str(), c.str());
  // A case flag restricts what is drawn.
  o.flags.dtypes = {"bfloat16"};
  std::ostringstream d;
  EXPECT_EQ(run_cases(o, d), k_exit_ok);
  for (const auto& one : Json::parse(d.str())) EXPECT_EQ(one.at("dtype"), "bfloat16");
}

FuzzCommandOptions in_process_fuzz(const std::string& kernel, std::uint64_t seed,
                                   std::int64_t iterations) {
  FuzzCommandOptions o;
  o.op = "softmax";
  o.kernel = kernel;
  o.no_daemon = true;
  o.seed = seed;
  o.iterations = iterations;
  o.json = true;
  return o;
}

TEST(CliCommands, InProcessFuzzJudgesACorrectAndABuggyKernel) {
  std::ostringstream good_out, bad_out;
  EXPECT_EQ(run_fuzz(in_process_fuzz("fp32_online", 3, 20), {}, good_out), k_exit_ok);
  const Json good = Json::parse(good_out.str());
  EXPECT_EQ(good.at("total"), 20);
  EXPECT_EQ(good.at("passed"), 20);
  EXPECT_EQ(good.at("seed"), 3);

  EXPECT_EQ(run_fuzz(in_process_fuzz("tail_leak", 7, 40), {}, bad_out), k_exit_failed);
  const Json bad = Json::parse(bad_out.str());
  EXPECT_EQ(bad.at("total"), 40);
  ASSERT_FALSE(bad.at("failures").empty());
  EXPECT_GT(bad.at("failed").get<int>(), 0);
  EXPECT_NE(bad.at("failures")[0].at("repro").get<std::string>().find(
                "gpuemu fuzz softmax --kernel tail_leak --no-daemon"),
            std::string::npos);
  // The same seed draws the same run: the same failing cases.
  std::ostringstream again;
  EXPECT_EQ(run_fuzz(in_process_fuzz("tail_leak", 7, 40), {}, again), k_exit_failed);
  EXPECT_EQ(Json::parse(again.str()).at("first_failure"), bad.at("first_failure"));

  // --case I replays that case alone.
  FuzzCommandOptions one = in_process_fuzz("tail_leak", 7, 40);
  one.only_case = bad.at("first_failure").get<std::int64_t>();
  std::ostringstream replay;
  EXPECT_EQ(run_fuzz(one, {}, replay), k_exit_failed);
  EXPECT_EQ(Json::parse(replay.str()).at("index"), one.only_case);
}

TEST(CliCommands, FuzzRefusesBadOptionsBeforeRunning) {
  std::ostringstream out;
  FuzzCommandOptions both = in_process_fuzz("fp32_online", 1, 2);
  both.script = "k.py:f";
  EXPECT_THROW(run_fuzz(both, {}, out), GpuemuException);
  FuzzCommandOptions envelope = in_process_fuzz("fp32_online", 1, 2);
  envelope.envelope = {"3"};
  try {
    run_fuzz(envelope, {}, out);
    FAIL() << "--no-daemon with --envelope ran";
  } catch (const GpuemuException& e) {
    EXPECT_NE(e.error().message.find("drop --no-daemon"), std::string::npos);
  }
  EXPECT_TRUE(out.str().empty());
}

TEST(CliCommands, InProcessCalibrationWritesItsTable) {
  const fs::path dir = fs::temp_directory_path() / ("gpuemu-cli-cal-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  CalibrateOptions o;
  o.ops = {"softmax"};
  o.dtypes = {"float32"};
  o.cases = 5;
  o.seed = 1;
  o.json = true;
  o.no_daemon = true;
  o.write_path = (dir / "env.json").string();
  std::ostringstream out;
  EXPECT_EQ(run_calibrate(o, {}, out), k_exit_ok);
  const Json results = Json::parse(out.str());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].at("op"), "softmax");
  EXPECT_EQ(results[0].at("dtype"), "float32");
  EXPECT_GT(results[0].at("envelope").get<double>(), 0.0);
  std::ifstream in(o.write_path);
  const Json table = Json::parse(in);
  EXPECT_EQ(table.at("generated_by"),
            "gpuemu calibrate --cases 5 --seed 1 --write " + o.write_path);
  fs::remove_all(dir);
}

// A temporary GPUEMU_HOME whose daemon the commands start themselves (autostart), stopped and
// removed afterwards.
class CliDaemonCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuemu-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    m_home = tmpl;
    save("GPUEMU_HOME", m_home.string());
    save("GPUEMU_DAEMON", GPUEMU_BIN_DIR "/gpuemu-daemon");
    save("NO_COLOR", "1");
  }

  void TearDown() override {
    if (HasFailure()) {
      std::ifstream log(m_home / "logs" / "daemon.log");
      std::cerr << "---- daemon log ----\n" << log.rdbuf() << "\n";
    }
    std::ostringstream out;
    try {
      run_daemon_stop({.json = true, .wait_s = 30}, out);
    } catch (const std::exception&) {
    }
    for (const auto& [name, old] : m_saved) {
      if (old)
        ::setenv(name.c_str(), old->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
    fs::remove_all(m_home);
  }

  void save(const std::string& name, const std::string& value) {
    const char* old = std::getenv(name.c_str());
    m_saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(name.c_str(), value.c_str(), 1);
  }

  fs::path m_home;
  std::vector<std::pair<std::string, std::optional<std::string>>> m_saved;
};

TEST_F(CliDaemonCommands, CiRunsEveryOpOfATomlAndRecordsItsFailures) {
  const fs::path project = m_home / "proj";
  fs::create_directories(project);
  {
    std::ofstream toml(project / "gpuemu.toml");
    toml << "[project]\nname = \"demo\"\n\n[defaults]\niterations = 12\nseed = 7\n"
            "dtypes = [\"float32\"]\n\n[[op]]\nname = \"softmax\"\nkernel = \"fp32_online\"\n\n"
            "[[op]]\nname = \"softmax\"\nkernel = \"tail_leak\"\ndims = { N = [65, 130] }\n";
  }
  CiOptions o;
  o.config = (project / "gpuemu.toml").string();
  o.json = true;
  o.junit = (project / "ci.xml").string();
  std::ostringstream out;
  EXPECT_EQ(run_ci(o, {}, out), k_exit_failed);
  const Json doc = Json::parse(out.str());
  EXPECT_EQ(doc.at("kind"), "ci");
  EXPECT_EQ(doc.at("project"), "demo");
  EXPECT_EQ(doc.at("preset"), "default");
  ASSERT_EQ(doc.at("results").size(), 2u);
  EXPECT_EQ(doc.at("results")[0].at("name"), "softmax[float32]");
  EXPECT_EQ(doc.at("results")[0].at("status"), "passed");
  EXPECT_EQ(doc.at("results")[0].at("cases"), 12);
  EXPECT_EQ(doc.at("results")[1].at("status"), "failed");
  EXPECT_EQ(doc.at("results")[1].at("kernel"), "builtin:tail_leak");
  EXPECT_EQ(doc.at("summary").at("failed"), 1);
  EXPECT_EQ(doc.at("summary").at("passed"), 1);
  EXPECT_TRUE(fs::file_size(project / "ci.xml") > 0);

  // The failure is in the daemon's store: failures list and the report see it.
  FailuresListOptions list;
  list.json = true;
  std::ostringstream listed;
  EXPECT_EQ(run_failures_list(list, {}, listed), k_exit_ok);
  const Json failures = Json::parse(listed.str());
  ASSERT_FALSE(failures.empty());
  EXPECT_EQ(failures[0].at("op"), "softmax");
  ReportOptions report;
  report.format = "json";
  std::ostringstream rendered;
  EXPECT_EQ(run_report(report, {}, rendered), k_exit_ok);
  const Json rdoc = Json::parse(rendered.str());
  EXPECT_EQ(rdoc.at("kind"), "failures");
  EXPECT_EQ(rdoc.at("results").size(), failures.size());
  ASSERT_FALSE(rdoc.at("runs").empty());  // gpuemu ci's history in this home
  EXPECT_EQ(rdoc.at("runs").back().at("failed"), 1);

  // An unknown preset is refused before anything runs.
  o.preset = "nope";
  std::ostringstream none;
  EXPECT_THROW(run_ci(o, {}, none), GpuemuException);
  EXPECT_TRUE(none.str().empty());
}

}  // namespace
}  // namespace gpuemu::cli
