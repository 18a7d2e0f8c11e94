// Shape-class coverage (gpuemu/engine/coverage.hpp) is the engine's: a run in this process
// (Engine::fuzz, as the CLI's --no-daemon, the Python module and these tests drive it) counts every
// case it judges in FuzzReport::coverage, the same counters the daemon stores with each of its runs
// and sums in its `coverage` reply.
#include "gpuemu/engine/coverage.hpp"
#include "gpuemu/engine/engine.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

namespace gpuemu {
namespace {

Engine& engine() { return testing_support::source_engine(); }

std::int64_t sum(const Json& counts) {
  std::int64_t n = 0;
  for (const auto& [key, v] : counts.items()) n += v.get<std::int64_t>();
  return n;
}

FuzzRequest softmax_run(std::int64_t iterations) {
  FuzzRequest req;
  req.op = "softmax";
  req.seed = 1;
  req.iterations = iterations;
  return req;
}

TEST(Coverage, ShapeClassesOfADimSize) {
  using V = std::vector<std::string>;
  EXPECT_EQ(shape_classes(1), V({"unit"}));
  EXPECT_EQ(shape_classes(65), V({"partial_tile"}));
  EXPECT_EQ(shape_classes(128), V({"full_tiles"}));
  EXPECT_EQ(shape_classes(129), V({"partial_tile", "multi_block"}));
  EXPECT_EQ(shape_classes(1024), V({"full_tiles", "multi_block", "long"}));
}

TEST(Coverage, AnInProcessRunRecordsTheCoverageOfEveryCaseItJudged) {
  const FuzzRequest req = softmax_run(24);
  auto report = engine().fuzz(req, engine().builtin_kernel("softmax", "fp32_online").value());
  ASSERT_TRUE(report.ok()) << report.error().what();
  const Json& cov = report->coverage;
  ASSERT_EQ(report->total, 24);
  EXPECT_EQ(cov.value("cases", std::int64_t{0}), 24) << cov.dump();
  EXPECT_EQ(sum(cov.value("dtypes", Json::object())), 24);
  EXPECT_EQ(sum(cov.value("distributions", Json::object())), 24);
  ASSERT_TRUE(cov.contains("shapes") && cov["shapes"].contains("N")) << cov.dump();

  // The counters are those of the run's cases, one by one (what the daemon stored for a run
  // before the accounting moved here).
  const OpSchema* schema = engine().catalogue().get("softmax").value();
  CaseGenerator gen(*schema, req.options);
  Json expected = Json::object();
  for (std::int64_t i = 0; i < req.iterations; ++i)
    coverage_add(expected, gen.generate(req.seed, i).value());
  EXPECT_EQ(cov, expected);

  const Json rep = coverage_report(*schema, cov);
  EXPECT_EQ(rep["cases"], 24);
  EXPECT_GT(rep["exercised"].get<int>(), 0);
  EXPECT_LE(rep["exercised"].get<int>(), rep["total"].get<int>());
}

TEST(Coverage, AFailFastRunCountsOnlyTheCasesItRan) {
  FuzzRequest req = softmax_run(200);
  req.seed = 77;  // fails within its first 10 cases (Minimize.TailMaskLandsOnePastTheBlock)
  req.fail_fast = true;
  req.diagnose = false;
  auto report = engine().fuzz(req, engine().builtin_kernel("softmax", "tail_leak").value());
  ASSERT_TRUE(report.ok()) << report.error().what();
  ASSERT_LT(report->total, 200);
  EXPECT_EQ(report->coverage.value("cases", std::int64_t{0}), report->total);
}

TEST(Coverage, MergeSumsTheCountersOfRuns) {
  Json a = {{"cases", 2}, {"dtypes", {{"float16", 2}}}, {"shapes", {{"N", {{"unit", 1}}}}}};
  const Json b = {{"cases", 3}, {"dtypes", {{"float16", 1}, {"float32", 2}}},
                  {"shapes", {{"N", {{"unit", 2}, {"long", 1}}}}}};
  coverage_merge(a, b);
  EXPECT_EQ(a, Json({{"cases", 5},
                     {"dtypes", {{"float16", 3}, {"float32", 2}}},
                     {"shapes", {{"N", {{"unit", 3}, {"long", 1}}}}}}));
}

}  // namespace
}  // namespace gpuemu
