#include "gpuemu/engine/engine.hpp"

#include "gpuemu/engine/fuzz_run.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

namespace gpuemu {

Engine::Engine(std::shared_ptr<const Catalogue> catalogue, EnvelopeTable envelopes)
    : m_catalogue(std::move(catalogue)), m_envelopes(std::move(envelopes)) {}

Result<Engine> Engine::create_default() {
  GPUEMU_TRY(auto cat, Catalogue::load_default());
  return Engine(std::move(cat), EnvelopeTable::load_default());
}

namespace {

RefContext context_of(const OpSchema& schema, const TestCase& c) {
  return case_ref_context(schema, c).value();
}

}  // namespace

Result<KernelRunner> Engine::builtin_kernel(const std::string& op, const std::string& name) const {
  GPUEMU_TRY(const OpSchema* schema, m_catalogue->get(op));
  const BuiltinOp* builtin = BuiltinRegistry::instance().find(schema->reference.substr(8));
  if (!builtin) return make_error(ErrorCode::not_found, "op '" + op + "' has no built-in kernels");
  const NamedKernel* found = nullptr;
  for (const auto& k : builtin->controls)
    if (k.name == name) found = &k;
  for (const auto& k : builtin->buggy)
    if (k.name == name) found = &k;
  if (!found) {
    std::string names;
    for (const auto& n : builtin_kernel_names(op)) names += (names.empty() ? "" : ", ") + n;
    return make_error(ErrorCode::not_found, "op '" + op + "' has no built-in kernel '" + name + "' (it has: " + names + ")");
  }
  KernelFn fn = found->run;
  return KernelRunner([schema, fn](const TestCase& c) -> Result<std::vector<Tensor>> {
    RefContext ctx = context_of(*schema, c);
    std::vector<std::vector<double>> values;
    try {
      GPUEMU_TRY(values, fn(ctx));
    } catch (const GpuemuException& e) {
      return e.error();
    }
    // Output shapes and dtypes are the reference's.
    GPUEMU_TRY(auto ref, run_reference(*schema, ctx));
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < values.size() && i < ref.size(); ++i)
      out.push_back(Tensor::from_values(ref[i].dtype, ref[i].shape, values[i]));
    return out;
  });
}

std::vector<std::string> Engine::builtin_kernel_names(const std::string& op) const {
  std::vector<std::string> names;
  const OpSchema* schema = m_catalogue->find(op);
  if (!schema || schema->reference.rfind("builtin:", 0) != 0) return names;
  if (const BuiltinOp* b = BuiltinRegistry::instance().find(schema->reference.substr(8))) {
    for (const auto& k : b->controls) names.push_back(k.name);
    for (const auto& k : b->buggy) names.push_back(k.name);
  }
  return names;
}

Result<Verdict> Engine::judge_case(const TestCase& c, const std::vector<Tensor>& outputs) const {
  GPUEMU_TRY(const OpSchema* schema, m_catalogue->get(c.op));
  RefContext ctx = context_of(*schema, c);
  GPUEMU_TRY(auto ref, run_reference(*schema, ctx));
  return judge(*schema, ctx, ref, outputs, m_envelopes.get(c.op, c.dtype));
}

Result<CaseJudge> Engine::case_judge(const TestCase& c) const {
  CaseJudge j;
  GPUEMU_TRY(j.m_schema, m_catalogue->get(c.op));
  j.m_ctx = context_of(*j.m_schema, c);
  GPUEMU_TRY(j.m_reference, run_reference(*j.m_schema, j.m_ctx));
  j.m_rounded = rounded_reference(j.m_reference);
  j.m_envelope = m_envelopes.get(c.op, c.dtype);
  return j;
}

Verdict CaseJudge::judge(const std::vector<Tensor>& outputs) const {
  return gpuemu::judge(*m_schema, m_ctx, m_reference, outputs, m_envelope, &m_rounded);
}

Result<CaseResult> Engine::run_case(const std::string& op, const FuzzOptions& options, const TestCase& c,
                                    const KernelRunner& kernel) const {
  (void)options;
  (void)op;
  CaseResult r;
  r.test_case = c;
  Result<std::vector<Tensor>> out = [&]() -> Result<std::vector<Tensor>> {
    try {
      return kernel(c);
    } catch (const std::exception& e) {
      return make_error(ErrorCode::internal, e.what());
    }
  }();
  if (!out) {
    r.kernel_error = out.error().message;
    r.verdict.passed = false;
    r.verdict.max_error = std::numeric_limits<double>::infinity();
    r.verdict.message = "the kernel raised: " + out.error().message;
    return r;
  }
  GPUEMU_TRY(r.verdict, judge_case(c, *out));
  return r;
}

Result<FuzzReport> Engine::fuzz(const FuzzRequest& req, const KernelRunner& kernel,
                                const std::function<void(std::int64_t, std::int64_t)>& progress) const {
  GPUEMU_TRY(const OpSchema* schema, m_catalogue->get(req.op));
  CaseGenerator gen(*schema, req.options);
  GPUEMU_TRY_STATUS(gen.validate());
  FuzzRun run(req);
  while (run.take(1) == 1) {
    const std::int64_t i = run.next_index() - 1;
    GPUEMU_TRY(TestCase c, gen.generate(req.seed, i));
    GPUEMU_TRY(CaseResult r, run_case(req.op, req.options, c, kernel));
    run.count_coverage(r.test_case);
    if (req.on_case) req.on_case(r);
    switch (run.diagnosis_for(r)) {
      case FuzzRun::Diagnose::full: r.diagnosis = diagnose(req.op, req.options, r, &kernel); break;
      case FuzzRun::Diagnose::probes:  // a raised kernel's signature: a few runs of it
        r.diagnosis = diagnose(req.op, req.options, r, req.diagnose ? &kernel : nullptr);
        break;
      case FuzzRun::Diagnose::none: break;
    }
    run.record(std::move(r));
    if (progress) progress(i - req.start_index + 1, req.iterations);
  }
  FuzzReport report = run.finish();
  // Minimize-first: the first failures, shrunk with the same kernel (not counted in elapsed).
  for (int k = 0; k < req.minimize && static_cast<std::size_t>(k) < report.failures.size(); ++k) {
    CaseResult& f = report.failures[static_cast<std::size_t>(k)];
    if (auto m = minimize(req.op, req.options, f.test_case, kernel)) f.minimized = std::move(m).value();
  }
  return report;
}

Json Diagnosis::to_json() const {
  return Json{{"bug_class", bug_class}, {"summary", summary}, {"evidence", evidence}};
}

Json CaseResult::to_json(bool with_inputs) const {
  Json j = test_case.describe();
  if (!with_inputs) j.erase("inputs");
  j["layouts"] = Json::object();
  for (const auto& [n, l] : test_case.layouts) j["layouts"][n] = l.kind;
  j["shapes"] = Json::object();
  for (const auto& [n, t] : test_case.inputs) j["shapes"][n] = t.shape();
  j["passed"] = verdict.passed;
  j["verdict"] = verdict.to_json();
  j["max_error"] = verdict.to_json()["max_error"];
  j["envelope"] = verdict.envelope;
  j["message"] = verdict.message;
  if (!kernel_error.empty()) j["kernel_error"] = kernel_error;
  j["diagnosis"] = diagnosis.to_json();
  j["repro"] = repro;
  if (minimized) j["minimized"] = minimized->to_json();
  return j;
}

Json FuzzReport::to_json() const {
  Json j{{"op", op}, {"seed", master_seed}, {"total", total}, {"passed", passed},
         {"failed", total - passed - inconclusive}, {"first_failure", first_failure}, {"elapsed", elapsed_s}};
  if (inconclusive) j["inconclusive"] = inconclusive;
  // JSON has no infinity: "inf", as the verdict writes max_error.
  j["worst"] = Json{{"index", worst_index}, {"ratio", std::isfinite(worst_ratio) ? Json(worst_ratio) : Json("inf")}};
  j["failures"] = Json::array();
  for (const auto& f : failures) j["failures"].push_back(f.to_json(true));
  // The first failure's smallest case, where the run minimized (as the daemon's reply names it).
  if (!failures.empty() && failures.front().minimized) j["minimized"] = failures.front().minimized->to_json();
  return j;
}

}  // namespace gpuemu
