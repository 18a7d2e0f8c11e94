// One fuzz run (gpuemu/engine/fuzz_run.hpp): the books every way of running a kernel shares — the
// diagnosis budget, repro commands, first failure, worst case, fail-fast, out-of-order records —
// and Engine::fuzz's minimize-first through it.
#include "gpuemu/engine/fuzz_run.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace gpuemu {
namespace {

Engine& engine() { return testing_support::source_engine(); }

CaseResult judged(std::int64_t index, bool passed, double max_error, double envelope = 2.0,
                  const std::string& kernel_error = "") {
  CaseResult r;
  r.test_case.index = index;
  r.verdict.passed = passed;
  r.verdict.max_error = max_error;
  r.verdict.envelope = envelope;
  r.kernel_error = kernel_error;
  return r;
}

FuzzRequest request(std::int64_t iterations) {
  FuzzRequest req;
  req.op = "softmax";
  req.seed = 99;
  req.iterations = iterations;
  req.start_index = 10;
  return req;
}

TEST(FuzzRun, ReproCommandsAreBuiltInOnePlace) {
  EXPECT_EQ(repro_command("", "softmax", 7, 3), "gpuemu fuzz softmax --seed 7 --case 3");
  EXPECT_EQ(repro_command("gpuemu fuzz softmax --kernel tail_leak --dtype float16", "softmax", 7, 3),
            "gpuemu fuzz softmax --kernel tail_leak --dtype float16 --seed 7 --case 3");
}

TEST(FuzzRun, EnvelopeRatioIsInfiniteWhereTheErrorDoesNotExplainAFailure) {
  EXPECT_DOUBLE_EQ(envelope_ratio(judged(0, true, 1.0, 2.0).verdict), 0.5);
  EXPECT_DOUBLE_EQ(envelope_ratio(judged(0, false, 8.0, 2.0).verdict), 4.0);
  EXPECT_TRUE(std::isinf(envelope_ratio(judged(0, false, 1.0, 2.0).verdict)));  // failed on NaN, say
  EXPECT_TRUE(std::isinf(envelope_ratio(judged(0, false, std::numeric_limits<double>::infinity()).verdict)));
}

TEST(FuzzRun, KeepsTheBooksOfCasesRecordedOutOfOrder) {
  FuzzRun run(request(6));
  EXPECT_EQ(run.take(4), 4);
  EXPECT_EQ(run.next_index(), 14);
  EXPECT_EQ(run.take(4), 2);  // only 6 cases in the run
  EXPECT_EQ(run.take(4), 0);
  // A client's chunk comes back in any order.
  for (auto r : {judged(13, false, 10.0), judged(10, true, 1.0), judged(15, true, 1.9), judged(11, false, 6.0)})
    run.record(r);
  EXPECT_FALSE(run.done());
  run.record(judged(12, true, 0.1));
  run.record(judged(14, true, 0.2));
  EXPECT_TRUE(run.done());
  const FuzzReport rep = run.finish();
  EXPECT_EQ(rep.total, 6);
  EXPECT_EQ(rep.passed, 4);
  EXPECT_EQ(rep.first_failure, 11);
  EXPECT_EQ(rep.worst_index, 13);
  EXPECT_DOUBLE_EQ(rep.worst_ratio, 5.0);
  ASSERT_EQ(rep.failures.size(), 2u);
  EXPECT_EQ(rep.failures[0].test_case.index, 11);  // in index order
  EXPECT_EQ(rep.failures[1].test_case.index, 13);
  EXPECT_EQ(rep.failures[0].repro, "gpuemu fuzz softmax --seed 99 --case 11");
}

TEST(FuzzRun, TheDiagnosisBudgetIsTheFirstFailures) {
  FuzzRequest req = request(10);
  req.diagnose_limit = 2;
  FuzzRun run(req);
  const CaseResult numeric = judged(10, false, 9.0), raised = judged(11, false, INFINITY, 2.0, "boom");
  EXPECT_EQ(run.diagnosis_for(judged(10, true, 0.1)), FuzzRun::Diagnose::none);
  EXPECT_EQ(run.diagnosis_for(numeric), FuzzRun::Diagnose::full);
  EXPECT_EQ(run.diagnoses_left(), 2);
  run.record(numeric);
  run.record(raised);  // a raised kernel counts against the budget too
  EXPECT_EQ(run.diagnoses_left(), 0);
  EXPECT_EQ(run.diagnosis_for(judged(12, false, 9.0)), FuzzRun::Diagnose::none);
  EXPECT_EQ(run.diagnosis_for(judged(13, false, INFINITY, 2.0, "boom")), FuzzRun::Diagnose::probes);
  run.record(judged(12, false, 9.0));
  EXPECT_EQ(run.report().failures.back().diagnosis.bug_class, "not_diagnosed");

  req.diagnose = false;
  FuzzRun off(req);
  EXPECT_EQ(off.diagnoses_left(), 0);
  EXPECT_EQ(off.diagnosis_for(numeric), FuzzRun::Diagnose::none);
}

TEST(FuzzRun, FailFastEndsTheRunAtTheFirstFailure) {
  FuzzRequest req = request(10);
  req.fail_fast = true;
  FuzzRun run(req);
  run.take(3);
  run.record(judged(10, true, 0.1));
  EXPECT_FALSE(run.done());
  run.record(judged(11, false, 9.0));
  EXPECT_TRUE(run.done());
  EXPECT_EQ(run.take(5), 0);
}

TEST(FuzzRun, EngineFuzzMinimizesTheFirstFailuresWithItsKernel) {
  FuzzRequest req;
  req.op = "softmax";
  req.seed = 77;
  req.iterations = 10;
  req.diagnose = false;
  req.minimize = 1;
  auto k = engine().builtin_kernel("softmax", "tail_leak").value();
  auto r = engine().fuzz(req, k).value();
  ASSERT_GE(r.failures.size(), 2u);
  ASSERT_TRUE(r.failures[0].minimized.has_value());
  EXPECT_NE(r.failures[0].minimized->summary.find("fails at N=129, passes at N=128"), std::string::npos)
      << r.failures[0].minimized->summary;
  EXPECT_FALSE(r.failures[1].minimized.has_value());  // only the first asked for
  const Json j = r.to_json();
  EXPECT_EQ(j.at("minimized").at("summary"), j.at("failures")[0].at("minimized").at("summary"));
  // The same run with a case replayed alone (the CLI's --case) is the same case, judged the same.
  FuzzRequest one = req;
  one.minimize = 0;
  one.start_index = r.failures[0].test_case.index;
  one.iterations = 1;
  auto again = engine().fuzz(one, k).value();
  ASSERT_EQ(again.failures.size(), 1u);
  EXPECT_EQ(again.failures[0].test_case.seed, r.failures[0].test_case.seed);
  EXPECT_EQ(again.failures[0].verdict.max_error, r.failures[0].verdict.max_error);
  EXPECT_EQ(again.failures[0].repro, r.failures[0].repro);
}

}  // namespace
}  // namespace gpuemu
