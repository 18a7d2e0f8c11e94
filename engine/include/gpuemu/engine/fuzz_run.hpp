// One fuzz run, written once. Whoever runs the kernel — this process through Engine::fuzz, or a
// client that runs it elsewhere and hands its outputs to the daemon case by case — feeds every
// judged case to the same FuzzRun, which keeps the run's books: which cases are still to run,
// which failures get the full diagnosis (the budget), the repro command of each failure, the first
// failure, the case closest to its envelope, the coverage of its cases, fail-fast, and the summary
// (FuzzReport) every client renders. Minimizing the first failures needs the kernel, so
// Engine::fuzz does it when the request asks (FuzzRequest::minimize); a client-side run minimizes
// where its kernel is.
#pragma once

#include "gpuemu/engine/coverage.hpp"
#include "gpuemu/engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace gpuemu {

// The command that replays case `index` of the run with master seed `seed`: `prefix` (how the run
// was started, e.g. "gpuemu fuzz softmax --kernel tail_leak --dtype float16"; empty: "gpuemu fuzz
// OP") then " --seed S --case I". Every repro command gpuemu prints is built here.
std::string repro_command(const std::string& prefix, const std::string& op, std::uint64_t seed,
                          std::int64_t index);

// max_error / envelope of a verdict: how close a case came to failing (below 1 passes); infinity
// for a kernel error, a non-finite mismatch, or a failure its error alone does not explain.
double envelope_ratio(const Verdict& v);

class FuzzRun {
 public:
  // How much diagnosis a failing case gets (Engine::diagnose): `full` re-runs the kernel on the
  // probe cases; `probes` reads only what needs no kernel (a raised kernel's signature: absent
  // input, unsupported attr); `none` records "not diagnosed".
  enum class Diagnose { full, probes, none };

  explicit FuzzRun(FuzzRequest request);

  const FuzzRequest& request() const { return m_request; }
  // Case indices are [request.start_index, end_index()).
  std::int64_t end_index() const { return m_request.start_index + m_request.iterations; }
  // The next case not handed out yet.
  std::int64_t next_index() const { return m_next; }
  // Hands out up to `n` more cases: returns how many (0 when the run is over or all are out).
  std::int64_t take(std::int64_t n);
  // Every case recorded, or a failure under fail_fast.
  bool done() const;

  // What diagnosis a failing case should get now (the budget: the first diagnose_limit failures
  // get the full one). Asking does not spend the budget; record() does.
  Diagnose diagnosis_for(const CaseResult& r) const;
  // Records one judged case: counts it, keeps the worst, the first failure and (for a failure)
  // its repro command; a failure given no diagnosis is recorded as "not diagnosed". Cases may
  // come in any order (a client's chunks); the failures are kept in index order.
  void record(CaseResult r);
  // Counts a judged case in the run's coverage (FuzzReport::coverage). Engine::fuzz counts every
  // case it judges; record() does not, since a client-side run records a passing case by its
  // index and verdict alone (the daemon counts those runs' coverage per submission).
  void count_coverage(const TestCase& c);

  const FuzzReport& report() const { return m_report; }
  std::chrono::steady_clock::time_point started() const { return m_start; }
  // Full diagnoses the budget has left.
  int diagnoses_left() const { return m_request.diagnose ? std::max(m_request.diagnose_limit - m_diagnosed, 0) : 0; }
  // The summary, with the elapsed time since the run was made.
  FuzzReport finish();

 private:
  FuzzRequest m_request;
  FuzzReport m_report;
  std::int64_t m_next = 0;
  std::int64_t m_recorded = 0;
  int m_diagnosed = 0;
  std::chrono::steady_clock::time_point m_start;
};

}  // namespace gpuemu
