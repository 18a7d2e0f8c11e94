// Shared harness of the ops_a_* tests (elementwise, reduction, norm and loss ops): loads an op's
// schema through the real parser, builds RefContexts from drawn inputs, runs the reference, the
// controls and the known-buggy kernels, and scores each with the error model
//   err = |out - ref| / (u_out*|ref| + u_fp32*c_acc + u_in*c_in + tiny_out)
// (non-finite elements compared with the reference rounded to the output dtype, as the verdict
// does). Each op's test asserts controls <= k_control_limit and every buggy kernel above
// k_bug_floor on the scenarios that trigger it, and prints the table of maxima per dtype.
#pragma once

#include "gpuemu/engine/op.hpp"
#include "gpuemu/engine/op_schema.hpp"
#include "gpuemu/engine/rng.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gpuemu::test_a {

constexpr double k_control_limit = 3.0;
constexpr double k_bug_floor = 20.0;
constexpr double k_u_fp32 = 0x1p-24;
constexpr double k_inf = std::numeric_limits<double>::infinity();
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();
inline const std::vector<DType> k_dtypes = {DType::float32, DType::float16, DType::bfloat16};

inline const OpSchema& schema_of(const std::string& op) {
  static std::map<std::string, std::unique_ptr<OpSchema>> cache;
  auto it = cache.find(op);
  if (it != cache.end()) return *it->second;
  const std::string path = std::string(GPUEMU_SOURCE_DIR) + "/schemas/ops/" + op + ".json";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = parse_op_schema(ss.str(), path);
  if (!parsed) throw std::runtime_error(parsed.error().message);
  auto& slot = cache[op];
  slot = std::make_unique<OpSchema>(std::move(parsed).value());
  return *slot;
}

inline const BuiltinOp& builtin_of(const std::string& op) {
  const BuiltinOp* b = BuiltinRegistry::instance().find(op);
  if (!b) throw std::runtime_error("no built-in op " + op);
  return *b;
}

inline RefArg arg(DType dtype, Shape shape, std::vector<double> values) {
  RefArg a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.assign(values.begin(), values.end());
  return a;
}

// A context for `op` with the given inputs and attrs (the rest at their schema defaults).
inline RefContext make_ctx(const std::string& op, DType dtype,
                           std::map<std::string, RefArg, std::less<>> inputs,
                           const Json& attrs = Json::object()) {
  const OpSchema& s = schema_of(op);
  RefContext ctx;
  ctx.case_dtype = dtype;
  ctx.schema = &s;
  ctx.inputs = std::move(inputs);
  auto resolved = s.resolve_attrs(attrs);
  if (!resolved) throw std::runtime_error(resolved.error().message);
  ctx.attrs = *resolved;
  return ctx;
}

// ---- values (every one exactly representable in `dtype`)
inline std::vector<double> normal_values(Rng& rng, std::int64_t n, double mean, double stddev,
                                         DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = round_to(dtype, mean + stddev * rng.normal());
  return v;
}

// Magnitudes log-uniform in [10^lo, 10^hi], random signs unless `positive`.
inline std::vector<double> wide_values(Rng& rng, std::int64_t n, double lo, double hi, DType dtype,
                                       bool positive = false) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    const double m = std::pow(10.0, rng.uniform(lo, hi));
    x = round_to(dtype, positive || rng.chance(1, 2) ? m : -m);
  }
  return v;
}

inline std::vector<double> uniform_values(Rng& rng, std::int64_t n, double lo, double hi,
                                          DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = round_to(dtype, rng.uniform(lo, hi));
  return v;
}

// NaN, +-Inf, -0 and +0 at about 1 element in `every`.
inline void sprinkle_specials(std::vector<double>& v, Rng& rng, std::uint64_t every = 40) {
  const double specials[] = {k_nan, k_inf, -k_inf, -0.0, 0.0};
  for (auto& x : v)
    if (rng.chance(1, every)) x = specials[rng.bounded(5)];
}

// ---- scoring
inline double element_error(double out, double ref, double c_acc, double c_in, DType out_dtype,
                            DType in_dtype, std::uint8_t alt = 0) {
  const auto& o = dtype_info(out_dtype);
  const double r = round_to(out_dtype, ref);
  if (!std::isfinite(out) || !std::isfinite(r)) {
    const bool same =
        (std::isnan(out) && std::isnan(r)) || (!std::isnan(out) && !std::isnan(r) && out == r);
    if (same || alt_accepts(alt, out)) return 0.0;  // equal, or an accepted alternative
    const double fp32_max = static_cast<double>(std::numeric_limits<float>::max());
    if (std::isfinite(r) && !std::isfinite(out) && c_acc >= fp32_max / 4)
      return 0.0;  // indeterminate
    return k_inf;
  }
  const double denom = o.unit_roundoff * std::fabs(ref) + k_u_fp32 * c_acc +
                       dtype_info(in_dtype).unit_roundoff * c_in + o.min_normal;
  return std::fabs(out - ref) / denom;
}

inline double max_error(const std::vector<RefOutput>& ref,
                        const std::vector<std::vector<double>>& out, DType in_dtype) {
  if (ref.size() != out.size()) return k_inf;
  double worst = 0.0;
  for (std::size_t k = 0; k < ref.size(); ++k) {
    const RefOutput& r = ref[k];
    if (out[k].size() != r.value.size()) return k_inf;
    for (std::size_t i = 0; i < r.value.size(); ++i) {
      const double ca = r.c_acc.empty() ? 0.0 : r.c_acc[i];
      const double ci = r.c_in.empty() ? 0.0 : r.c_in[i];
      const std::uint8_t alt = r.alt_nonfinite.empty() ? 0 : r.alt_nonfinite[i];
      worst = std::max(worst, element_error(out[k][i], r.value[i], ca, ci, r.dtype, in_dtype, alt));
    }
  }
  return worst;
}

struct Scenario {
  std::string label;
  RefContext ctx;
};

// Which (buggy kernel, dtype) pairs are not expected to be caught, with the reason.
struct Exemption {
  std::string kernel;
  DType dtype;
  std::string reason;
};

// A control allowed to exceed the limit on scenarios whose label contains `scenario`, in `dtype`
// (reported in the table, not failed), with the reason.
struct ControlExemption {
  std::string kernel, scenario;
  DType dtype;
  std::string reason;
};

struct OpScores {
  std::map<std::string, std::map<DType, double>> control, buggy;  // kernel -> dtype -> max err
  std::map<std::string, std::map<DType, std::string>> worst_at;   // kernel -> dtype -> scenario
};

inline std::string fmt_err(double e) {
  if (std::isinf(e)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, e < 1e4 ? "%.3g" : "%.2e", e);
  return buf;
}

// An op-specific error (argmax judges indices); default: max_error.
using Scorer = std::function<double(const RefContext&, const std::vector<RefOutput>&,
                                    const std::vector<std::vector<double>>&)>;

// Runs every kernel of `op` on every scenario, prints the table, checks the limits.
inline OpScores score_op(const std::string& op, const std::vector<Scenario>& scenarios,
                         const std::vector<Exemption>& exemptions = {},
                         const std::vector<ControlExemption>& control_exemptions = {},
                         const Scorer& scorer = {}) {
  const BuiltinOp& b = builtin_of(op);
  OpScores s;
  for (const Scenario& sc : scenarios) {
    auto ref = b.reference(sc.ctx);
    if (!ref) {
      ADD_FAILURE() << op << " / " << sc.label << ": reference failed: " << ref.error().message;
      continue;
    }
    const DType dt = sc.ctx.case_dtype;
    auto run = [&](const NamedKernel& k, std::map<std::string, std::map<DType, double>>& into) {
      auto out = k.run(sc.ctx);
      double e = k_inf;
      if (out)
        e = scorer ? scorer(sc.ctx, *ref, *out) : max_error(*ref, *out, dt);
      else
        ADD_FAILURE() << op << " / " << k.name << " / " << sc.label << ": " << out.error().message;
      const bool excused = &into == &s.control &&
                           std::any_of(control_exemptions.begin(), control_exemptions.end(),
                                       [&](const ControlExemption& x) {
                                         return x.kernel == k.name && x.dtype == dt &&
                                                sc.label.find(x.scenario) != std::string::npos;
                                       });
      if (excused) {
        if (!(e <= k_control_limit))
          std::printf("[ops-a] %s: control %s excused at %s on '%s' (%s)\n", op.c_str(),
                      k.name.c_str(), fmt_err(e).c_str(), sc.label.c_str(),
                      std::string(dtype_name(dt)).c_str());
        return;
      }
      double& slot = into[k.name].try_emplace(dt, 0.0).first->second;
      if (e > slot || (std::isnan(e))) {
        slot = e;
        s.worst_at[k.name][dt] = sc.label;
      }
      if (&into == &s.control && !(e <= k_control_limit))
        ADD_FAILURE() << op << ": control " << k.name << " at " << fmt_err(e) << " on '" << sc.label
                      << "' (" << dtype_name(dt) << ")";
    };
    for (const auto& k : b.controls) run(k, s.control);
    for (const auto& k : b.buggy) run(k, s.buggy);
  }
  for (const auto& k : b.buggy) {
    for (DType dt : k_dtypes) {
      auto it = s.buggy[k.name].find(dt);
      if (it == s.buggy[k.name].end()) continue;
      const bool exempt =
          std::any_of(exemptions.begin(), exemptions.end(),
                      [&](const Exemption& x) { return x.kernel == k.name && x.dtype == dt; });
      if (!exempt && !(it->second > k_bug_floor))
        ADD_FAILURE() << op << ": buggy " << k.name << " only reaches " << fmt_err(it->second)
                      << " in " << dtype_name(dt);
    }
  }
  // The table: one line per kernel, max error per dtype.
  auto line = [&](const char* kind, const std::string& name, const std::map<DType, double>& m) {
    std::printf("[ops-a] %-13s %-8s %-22s", op.c_str(), kind, name.c_str());
    for (DType dt : k_dtypes) {
      auto it = m.find(dt);
      std::printf(" %9s=%-9s", std::string(dtype_name(dt)).c_str(),
                  it == m.end() ? "-" : fmt_err(it->second).c_str());
    }
    std::printf("\n");
  };
  for (const auto& k : b.controls) line("control", k.name, s.control[k.name]);
  for (const auto& k : b.buggy) line("buggy", k.name, s.buggy[k.name]);
  if (std::getenv("GPUEMU_OPS_A_VERBOSE"))  // where each maximum was reached
    for (const auto& [kernel, by_dtype] : s.worst_at)
      for (const auto& [dt, label] : by_dtype)
        std::printf("[ops-a]   %s %s %s: worst on '%s'\n", op.c_str(), kernel.c_str(),
                    std::string(dtype_name(dt)).c_str(), label.c_str());
  std::fflush(stdout);
  return s;
}

}  // namespace gpuemu::test_a
