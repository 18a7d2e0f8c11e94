#include "gpuemu/engine/fuzz_run.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpuemu {

std::string repro_command(const std::string& prefix, const std::string& op, std::uint64_t seed,
                          std::int64_t index) {
  return (prefix.empty() ? "gpuemu fuzz " + op : prefix) + " --seed " + std::to_string(seed) +
         " --case " + std::to_string(index);
}

double envelope_ratio(const Verdict& v) {
  const double inf = std::numeric_limits<double>::infinity();
  if (!std::isfinite(v.max_error)) return inf;
  const double ratio = v.envelope > 0 ? v.max_error / v.envelope : (v.max_error > 0 ? inf : 0.0);
  if (!v.passed && !(ratio > 1.0)) return inf;  // failed on what the error does not measure
  return ratio;
}

FuzzRun::FuzzRun(FuzzRequest request)
    : m_request(std::move(request)), m_next(m_request.start_index), m_start(std::chrono::steady_clock::now()) {
  m_report.op = m_request.op;
  m_report.master_seed = m_request.seed;
}

std::int64_t FuzzRun::take(std::int64_t n) {
  if (done()) return 0;
  const std::int64_t k = std::clamp<std::int64_t>(end_index() - m_next, 0, std::max<std::int64_t>(n, 0));
  m_next += k;
  return k;
}

bool FuzzRun::done() const {
  return m_recorded >= m_request.iterations || (m_request.fail_fast && !m_report.failures.empty());
}

FuzzRun::Diagnose FuzzRun::diagnosis_for(const CaseResult& r) const {
  if (r.verdict.passed) return Diagnose::none;
  if (m_request.diagnose && m_diagnosed < m_request.diagnose_limit) return Diagnose::full;
  // A raised kernel is still read for its signature (absent input, unsupported attr): a few runs
  // of the kernel, and none when diagnosis is off.
  return r.kernel_error.empty() ? Diagnose::none : Diagnose::probes;
}

void FuzzRun::record(CaseResult r) {
  ++m_recorded;
  ++m_report.total;
  const std::int64_t i = r.test_case.index;
  if (const double ratio = envelope_ratio(r.verdict);
      m_report.worst_index < 0 || ratio > m_report.worst_ratio ||
      (ratio == m_report.worst_ratio && i < m_report.worst_index)) {
    m_report.worst_ratio = ratio;
    m_report.worst_index = i;
  }
  if (r.verdict.passed) {
    ++(r.verdict.inconclusive ? m_report.inconclusive : m_report.passed);
    return;
  }
  if (m_report.first_failure < 0 || i < m_report.first_failure) m_report.first_failure = i;
  if (m_request.diagnose && m_diagnosed < m_request.diagnose_limit) ++m_diagnosed;
  if (r.diagnosis.bug_class.empty())
    r.diagnosis = {"not_diagnosed",
                   "not diagnosed (only the first " + std::to_string(m_request.diagnose_limit) +
                       " failures of a run are)",
                   {}};
  if (r.repro.empty()) r.repro = repro_command(m_request.repro_prefix, m_request.op, m_request.seed, i);
  auto at = std::upper_bound(m_report.failures.begin(), m_report.failures.end(), i,
                             [](std::int64_t x, const CaseResult& f) { return x < f.test_case.index; });
  m_report.failures.insert(at, std::move(r));
}

void FuzzRun::count_coverage(const TestCase& c) { coverage_add(m_report.coverage, c); }

FuzzReport FuzzRun::finish() {
  m_report.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  return m_report;
}

}  // namespace gpuemu
