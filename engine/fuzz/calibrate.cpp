// Envelope calibration: 1.5 x the 95th percentile, over correct controls, of each case's maximum
// normalised error, floored at what output rounding alone allows. Cases come from a seed space
// disjoint from every fuzz run's.
#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/rng.hpp"

#include <algorithm>
#include <cmath>

namespace gpuemu {

std::uint64_t calibration_case_seed(std::uint64_t seed, DType dtype, std::int64_t index) {
  return derive_seed(seed, "calibrate:" + std::string(dtype_name(dtype)) + ":" + std::to_string(index));
}

Json CalibrationResult::to_json() const {
  return Json{{"op", op},        {"dtype", std::string(dtype_name(dtype))},
              {"envelope", envelope}, {"p95", p95}, {"max", max}, {"cases", cases},
              {"controls", controls}, {"seed", seed}, {"gpuemu_version", GPUEMU_VERSION},
              {"method", "1.5 x p95 of per-case max normalised error over controls, floor 2"}};
}

Result<CalibrationResult> Engine::calibrate(const std::string& op, DType dtype, std::int64_t cases,
                                            std::uint64_t seed,
                                            const std::vector<std::pair<std::string, KernelRunner>>& given) const {
  GPUEMU_TRY(const OpSchema* schema, m_catalogue->get(op));
  std::vector<std::pair<std::string, KernelRunner>> controls = given;
  if (controls.empty()) {
    const BuiltinOp* b = schema->reference.rfind("builtin:", 0) == 0
                             ? BuiltinRegistry::instance().find(schema->reference.substr(8)) : nullptr;
    if (b)
      for (const auto& k : b->controls) {
        GPUEMU_TRY(KernelRunner r, builtin_kernel(op, k.name));
        controls.emplace_back(k.name, std::move(r));
      }
  }
  if (controls.empty())
    return make_error(ErrorCode::invalid_argument, "op '" + op + "' has no controls to calibrate with");
  CalibrationResult result;
  result.op = op;
  result.dtype = dtype;
  result.seed = seed;
  for (const auto& [name, k] : controls) result.controls.push_back(name);
  std::vector<double> maxima;
  const Distribution dists[] = {Distribution::regular, Distribution::adversarial, Distribution::adversarial,
                                Distribution::boundary};
  for (std::int64_t i = 0; i < cases; ++i) {
    FuzzOptions options;
    options.dtypes = {dtype};
    options.distribution = dists[i % 4];
    options.layouts = false;
    CaseGenerator gen(*schema, options);
    GPUEMU_TRY(TestCase c, gen.generate_from_seed(calibration_case_seed(seed, dtype, i)));
    GPUEMU_TRY(RefContext ctx, case_ref_context(*schema, c));
    GPUEMU_TRY(auto ref, run_reference(*schema, ctx));
    for (const auto& [name, kernel] : controls) {
      auto out = kernel(c);
      if (!out) return make_error(out.error().code, "control '" + name + "' failed: " + out.error().message);
      Verdict v = judge(*schema, ctx, ref, *out, std::numeric_limits<double>::infinity());
      double m = 0.0;
      for (const auto& o : v.outputs)
        for (double e : o.errors)
          if (std::isfinite(e)) m = std::max(m, e);
      maxima.push_back(m);
    }
  }
  std::sort(maxima.begin(), maxima.end());
  result.cases = cases;
  if (!maxima.empty()) {
    const auto idx = static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(maxima.size()))) - 1;
    result.p95 = maxima[std::min(idx, maxima.size() - 1)];
    result.max = maxima.back();
  }
  result.envelope = std::max(EnvelopeTable::k_floor, 1.5 * result.p95);
  return result;
}

}  // namespace gpuemu
