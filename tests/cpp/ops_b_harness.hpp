// Test harness of the group-B op suites (ops_b_*_test.cpp): builds RefContexts from drawn values,
// computes the error model's normalised error of a kernel's output against the fp64 reference,
// and measures every control and buggy kernel of an op over a list of cases.
//
// err = |out - ref| / (u_out·|ref| + u_fp32·c_acc + u_in·c_in + tiny_out), per element, where
// u_in is the case dtype's unit roundoff and tiny_out the output dtype's smallest normal.
// Non-finite values: the reference rounded to the output dtype must match the output exactly
// (NaN matches NaN; overflowing to Inf in the output dtype is correct); a mismatch is +Inf,
// except where the verdict (engine/fuzz/verdict.cpp) calls the element indeterminate.
#pragma once

#include "gpuemu/engine/op.hpp"
#include "gpuemu/engine/rng.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace gpuemu::test_b {

inline constexpr double k_inf = std::numeric_limits<double>::infinity();
inline constexpr double k_fp32_max = static_cast<double>(std::numeric_limits<float>::max());

inline double max_normalised_error(const RefOutput& ref, const std::vector<double>& out,
                                   DType case_dtype) {
  if (out.size() != ref.value.size()) return k_inf;
  const double u_out = dtype_info(ref.dtype).unit_roundoff;
  const double u_acc = std::ldexp(1.0, -24);
  const double u_in = dtype_info(case_dtype).unit_roundoff;
  const double tiny = dtype_info(ref.dtype).min_normal;
  double worst = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double r = ref.value[i], o = out[i];
    const double r_rounded = round_to(ref.dtype, r);
    const double ca = ref.c_acc.empty() ? 0.0 : ref.c_acc[i];
    if (!std::isfinite(r_rounded) || !std::isfinite(o)) {
      const bool same = (std::isnan(r_rounded) && std::isnan(o)) || r_rounded == o;
      // The verdict's rule: a non-finite output where the terms accumulated in fp32 exceed its
      // range (c_acc >= FLT_MAX / 4) cannot be judged.
      const bool overflow_ok = std::isfinite(r_rounded) && 4.0 * ca >= k_fp32_max;
      if (!same && !overflow_ok) return k_inf;
      continue;
    }
    const double ci = ref.c_in.empty() ? 0.0 : ref.c_in[i];
    const double denom = u_out * std::fabs(r) + u_acc * ca + u_in * ci + tiny;
    worst = std::max(worst, std::fabs(o - r) / denom);
  }
  return worst;
}

// Values of `n` elements drawn by `gen`, rounded to `dtype` (exactly what a kernel receives).
inline RefArg make_arg(DType dtype, Shape shape, Rng& rng,
                       const std::function<double(Rng&, std::int64_t)>& gen) {
  RefArg a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  const std::int64_t n = a.numel();
  a.data.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) a.data[i] = round_to(dtype, gen(rng, i));
  return a;
}

// Common value generators.
inline std::function<double(Rng&, std::int64_t)> normal(double sigma, double mean = 0.0) {
  return [=](Rng& r, std::int64_t) { return mean + sigma * r.normal(); };
}
inline std::function<double(Rng&, std::int64_t)> uniform(double lo, double hi) {
  return [=](Rng& r, std::int64_t) { return r.uniform(lo, hi); };
}
// Normal values with about one in `every` multiplied by `factor` (outliers).
inline std::function<double(Rng&, std::int64_t)> outliers(double sigma, double factor,
                                                          std::uint64_t every = 64) {
  return [=](Rng& r, std::int64_t) {
    double v = sigma * r.normal();
    return r.chance(1, every) ? v * factor : v;
  };
}

struct Case {
  std::string label;
  RefContext ctx;
  std::set<std::string> triggers;  // buggy kernels this case must catch
};

// Per kernel: the largest error over all cases (controls), and the smallest over the cases that
// trigger it (buggy kernels: the weakest catch).
struct Measurement {
  std::map<std::string, double> control_max;
  std::map<std::string, double> buggy_min;
  std::map<std::string, std::string> worst_label;
};

// GPUEMU_TEST_VERBOSE=1 prints every (kernel, case) error.
inline bool verbose() {
  static const bool v = std::getenv("GPUEMU_TEST_VERBOSE") != nullptr;
  return v;
}

inline Measurement measure(const BuiltinOp& op, const std::vector<Case>& cases) {
  Measurement m;
  for (const auto& c : cases) {
    auto ref = op.reference(c.ctx);
    EXPECT_TRUE(ref.ok()) << op.name << " " << c.label << ": " << (ref ? "" : ref.error().message);
    if (!ref) continue;
    for (const auto& k : op.controls) {
      auto out = k.run(c.ctx);
      EXPECT_TRUE(out.ok()) << k.name << " " << c.label;
      if (!out) continue;
      const double e = max_normalised_error((*ref)[0], (*out)[0], c.ctx.case_dtype);
      if (verbose())
        std::printf("  %s control %s [%s] %.3g\n", op.name.c_str(), k.name.c_str(), c.label.c_str(),
                    e);
      auto [it, fresh] = m.control_max.try_emplace(k.name, e);
      if (fresh || e >= it->second) it->second = e, m.worst_label[k.name] = c.label;
    }
    for (const auto& k : op.buggy) {
      if (!c.triggers.count(k.name)) continue;
      auto out = k.run(c.ctx);
      EXPECT_TRUE(out.ok()) << k.name << " " << c.label;
      if (!out) continue;
      const double e = max_normalised_error((*ref)[0], (*out)[0], c.ctx.case_dtype);
      if (verbose())
        std::printf("  %s buggy %s [%s] %.3g\n", op.name.c_str(), k.name.c_str(), c.label.c_str(),
                    e);
      auto [it, fresh] = m.buggy_min.try_emplace(k.name, e);
      if (fresh || e <= it->second) it->second = e, m.worst_label[k.name] = c.label;
    }
  }
  return m;
}

// Prints one line per kernel ("[ops_b] op dtype control|buggy name err (case)") and asserts:
// every control <= control_limit on every case, every buggy kernel > bug_floor on every case that
// triggers it, and every buggy kernel has at least one triggering case.
inline void expect_verdicts(const BuiltinOp& op, DType dtype, const std::vector<Case>& cases,
                            double control_limit = 3.0, double bug_floor = 20.0) {
  const Measurement m = measure(op, cases);
  for (const auto& k : op.controls) {
    ASSERT_TRUE(m.control_max.count(k.name)) << k.name;
    const double e = m.control_max.at(k.name);
    std::printf("[ops_b] %-18s %-9s control %-24s %10.3g  (%s)\n", op.name.c_str(),
                std::string(dtype_name(dtype)).c_str(), k.name.c_str(), e,
                m.worst_label.at(k.name).c_str());
    EXPECT_LE(e, control_limit) << op.name << " control " << k.name << " on "
                                << m.worst_label.at(k.name);
  }
  for (const auto& k : op.buggy) {
    ASSERT_TRUE(m.buggy_min.count(k.name)) << op.name << ": no case triggers " << k.name;
    const double e = m.buggy_min.at(k.name);
    std::printf("[ops_b] %-18s %-9s buggy   %-24s %10.3g  (%s)\n", op.name.c_str(),
                std::string(dtype_name(dtype)).c_str(), k.name.c_str(), e,
                m.worst_label.at(k.name).c_str());
    EXPECT_GT(e, bug_floor) << op.name << " buggy " << k.name << " escaped on "
                            << m.worst_label.at(k.name);
  }
}

inline const BuiltinOp& builtin(std::string_view name) {
  const BuiltinOp* op = BuiltinRegistry::instance().find(name);
  if (!op) throw std::runtime_error("no builtin op " + std::string(name));
  return *op;
}

inline const NamedKernel& kernel(const std::vector<NamedKernel>& ks, std::string_view name) {
  for (const auto& k : ks)
    if (k.name == name) return k;
  throw std::runtime_error("no kernel " + std::string(name));
}

inline constexpr DType k_case_dtypes[] = {DType::float32, DType::float16, DType::bfloat16};

}  // namespace gpuemu::test_b
