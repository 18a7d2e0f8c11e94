// The validation service: fuzz an op against a kernel, judge each case, calibrate envelopes,
// minimise and diagnose failures. No transport or wire format in here: the CLI's --no-daemon
// mode, the Python module, the tests and the daemon all drive this class directly.
#pragma once

#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/verdict.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu {

// Runs the kernel under test on one case; returns its outputs (any layout) or an error (the
// kernel raised / crashed: that is a failing case, with the message).
using KernelRunner = std::function<Result<std::vector<Tensor>>(const TestCase&)>;

// Envelopes per (op, dtype): the shipped defaults (schemas/envelopes.json), overridden by the
// user's calibrations. The floor is what pure output rounding allows.
class EnvelopeTable {
 public:
  static constexpr double k_floor = 2.0;
  static constexpr double k_fallback = 4.0;  // an op never calibrated
  static Result<EnvelopeTable> load_file(const std::string& path);  // missing file: empty table
  static EnvelopeTable load_default();  // $GPUEMU_ENVELOPES or schemas/envelopes.json
  double get(const std::string& op, DType dtype) const;
  bool has(const std::string& op, DType dtype) const;
  void set(const std::string& op, DType dtype, double envelope, Json provenance = {});
  Json to_json() const;
  static Result<EnvelopeTable> from_json(const Json& j);

 private:
  std::map<std::string, std::map<std::string, double>> m_env;
  std::map<std::string, std::map<std::string, Json>> m_provenance;
};

struct Diagnosis {
  std::string bug_class;   // tail_mask | missing_scale | accumulation | online_rescale |
                           // stride_assumption | overflow | eps_placement | wrong_constant |
                           // kernel_error | contract | no_pattern
  std::string summary;     // one line
  std::vector<std::string> evidence;
  Json to_json() const;
};

struct Minimized {
  TestCase test_case;
  Verdict verdict;
  std::string summary;  // "fails at N=129, passes at N=128"
  std::map<std::string, std::int64_t, std::less<>> dims;
  std::map<std::string, std::string, std::less<>> transforms;
  int evaluations = 0;
  Json to_json() const;
};

struct CaseResult {
  TestCase test_case;
  Verdict verdict;
  std::string kernel_error;  // non-empty when the kernel raised
  Diagnosis diagnosis;
  std::string repro;         // a command that replays it
  std::optional<Minimized> minimized;  // the smallest failing case found (FuzzRequest::minimize)
  Json to_json(bool with_inputs = false) const;
};

struct FuzzReport {
  std::string op;
  std::uint64_t master_seed = 0;
  std::int64_t total = 0;
  std::int64_t passed = 0;
  // Cases that passed where they could be judged but hold elements the reference cannot resolve
  // (Verdict::inconclusive): neither passed nor failed. failed = total - passed - inconclusive.
  std::int64_t inconclusive = 0;
  std::int64_t first_failure = -1;  // index of the first failing case
  double elapsed_s = 0.0;
  std::vector<CaseResult> failures;
  // The case closest to (or furthest past) its envelope, passing or not: max_error / envelope
  // (below 1 passes; infinity for a kernel error or a non-finite mismatch). How much margin a
  // passing kernel kept, and what the Conformance sweep tabulates.
  double worst_ratio = 0.0;
  std::int64_t worst_index = -1;
  // What the run's cases exercised: coverage_add's counters of every case judged (dtypes, value
  // distributions, layouts, shape classes of each dim; gpuemu/engine/coverage.hpp). Not part of
  // to_json (the `fuzz` reply's report): the daemon records it with the run in its store.
  Json coverage = Json::object();
  Json to_json() const;
};

struct FuzzRequest {
  std::string op;
  FuzzOptions options;
  std::uint64_t seed = 0;
  std::int64_t iterations = 100;
  // The first case's index: cases [start_index, start_index + iterations) of the seed (a shard of
  // a larger run judges exactly those of its cases; docs/ci.md, "Sharding").
  std::int64_t start_index = 0;
  bool fail_fast = false;
  bool diagnose = true;
  int diagnose_limit = 3;    // failures diagnosed per run (each diagnosis re-runs the kernel)
  std::string repro_prefix;  // how to replay: "gpuemu fuzz softmax --kernel tail_leak"
  // The first `minimize` failures are shrunk (Engine::minimize, with the run's kernel) once the
  // cases have run: CaseResult::minimized. 0: none.
  int minimize = 0;
  // Called for every case judged (passing or not), in order (the daemon counts cases per dtype;
  // the run's coverage is FuzzReport::coverage).
  std::function<void(const CaseResult&)> on_case;
};

struct CalibrationResult {
  std::string op;
  DType dtype = DType::float32;
  double envelope = 0.0;
  double p95 = 0.0;
  double max = 0.0;
  std::int64_t cases = 0;
  std::vector<std::string> controls;
  std::uint64_t seed = 0;
  Json to_json() const;
};

// One case's fp64 reference (and its rounding to the output dtypes), computed once, against
// which any number of candidate outputs are judged exactly as judge_case judges them: a grid of
// mutants of one kernel (bench/power) costs one reference instead of one per mutant.
class CaseJudge {
 public:
  Verdict judge(const std::vector<Tensor>& outputs) const;
  double envelope() const { return m_envelope; }

 private:
  friend class Engine;
  const OpSchema* m_schema = nullptr;
  RefContext m_ctx;
  std::vector<RefOutput> m_reference;
  std::vector<std::vector<double>> m_rounded;
  double m_envelope = 0.0;
};

class Engine {
 public:
  Engine(std::shared_ptr<const Catalogue> catalogue, EnvelopeTable envelopes);
  static Result<Engine> create_default();

  const Catalogue& catalogue() const { return *m_catalogue; }
  // The catalogue, shared: what keeps its schemas alive for as long as a holder needs them.
  const std::shared_ptr<const Catalogue>& catalogue_ptr() const { return m_catalogue; }
  const EnvelopeTable& envelopes() const { return m_envelopes; }
  EnvelopeTable& envelopes() { return m_envelopes; }

  // A built-in emulated kernel of an op: a control ("fp32_two_pass") or a known bug ("tail_leak").
  Result<KernelRunner> builtin_kernel(const std::string& op, const std::string& name) const;
  std::vector<std::string> builtin_kernel_names(const std::string& op) const;

  // Generates case `index`, runs the kernel, judges it.
  Result<CaseResult> run_case(const std::string& op, const FuzzOptions& options, const TestCase& test_case,
                              const KernelRunner& kernel) const;
  Result<FuzzReport> fuzz(const FuzzRequest& request, const KernelRunner& kernel,
                          const std::function<void(std::int64_t, std::int64_t)>& progress = {}) const;

  // The reference and verdict of given outputs for a case.
  Result<Verdict> judge_case(const TestCase& test_case, const std::vector<Tensor>& outputs) const;
  // The case's reference, computed once, for judging any number of candidate outputs.
  Result<CaseJudge> case_judge(const TestCase& test_case) const;

  Result<Minimized> minimize(const std::string& op, const FuzzOptions& options, const TestCase& failing,
                             const KernelRunner& kernel, int max_evaluations = 200) const;
  Diagnosis diagnose(const std::string& op, const FuzzOptions& options, const CaseResult& failing,
                     const KernelRunner* kernel) const;

  // Envelope of (op, dtype) from correct controls: 1.5 x p95 of each case's max normalised error,
  // floored. Controls are the op's built-in ones unless `controls` is given.
  Result<CalibrationResult> calibrate(const std::string& op, DType dtype, std::int64_t cases, std::uint64_t seed,
                                      const std::vector<std::pair<std::string, KernelRunner>>& controls = {}) const;

 private:
  std::shared_ptr<const Catalogue> m_catalogue;
  EnvelopeTable m_envelopes;
};

// The seed space calibration draws from: disjoint from every fuzz run's case seeds.
std::uint64_t calibration_case_seed(std::uint64_t seed, DType dtype, std::int64_t index);

}  // namespace gpuemu
