// The vectorised exp (engine/ops/vec_exp.hpp) against std::exp over tens of millions of
// values, its special values, and its AVX2 lowering against the baseline one; then the softmax,
// log_softmax, layer_norm and rms_norm references (four lanes at a time, one exp per element)
// against the plain scalar loops they replaced, on odd shapes, strided dims and special values.
#include "ops/vec_exp.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops_a_harness.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace gpuemu {
namespace {

using ops::vd4;
using test_a::arg;
using test_a::builtin_of;
using test_a::k_inf;
using test_a::k_nan;
using test_a::make_ctx;

// Distance in ulps between two doubles of the same sign class, counting +inf as the double after
// DBL_MAX and +0 as the one before the smallest subnormal.
std::int64_t ulp_distance(double a, double b) {
  auto ordered = [](double x) {
    const auto i = std::bit_cast<std::int64_t>(x);
    return i < 0 ? std::numeric_limits<std::int64_t>::min() - i : i;
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// vexp over an array, with the baseline lowering of vd4 (this file's flags: x86-64 SSE2)...
void exp_baseline(const double* x, double* y, std::size_t n) {
  for (std::size_t i = 0; i + 4 <= n; i += 4) ops::store4(y + i, ops::vexp(ops::load4(x + i)));
}
// ... and the AVX2 one, which the references use where the CPU has it.
GPUEMU_TARGET_AVX2 void exp_avx2(const double* x, double* y, std::size_t n) {
  for (std::size_t i = 0; i + 4 <= n; i += 4)
    ops::store4(y + i, ops::vexp<ops::Isa::avx2>(ops::load4(x + i)));
}

// Checks vexp (all four lanes, both lowerings) and vexp1 against std::exp on xs (size % 4 == 0);
// returns the largest ulp distance seen.
std::int64_t check_against_std(const std::vector<double>& xs) {
  std::vector<double> base(xs.size()), avx(xs.size());
  exp_baseline(xs.data(), base.data(), xs.size());
  if (ops::cpu_has_avx2()) exp_avx2(xs.data(), avx.data(), xs.size());
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], want = std::exp(x), got = base[i];
    const double one = ops::vexp1(x);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(one), std::bit_cast<std::uint64_t>(got)) << x;
    if (ops::cpu_has_avx2()) {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(avx[i]), std::bit_cast<std::uint64_t>(got)) << x;
    }
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << x;
      continue;
    }
    EXPECT_FALSE(std::signbit(got)) << x;
    const std::int64_t d = ulp_distance(got, want);
    EXPECT_LE(d, 2) << "exp(" << std::hexfloat << x << ") = " << got << ", std::exp " << want;
    if (d > 2) return d;  // one report, not millions
    worst = std::max(worst, d);
  }
  return worst;
}

TEST(VecExp, WithinTwoUlpOfStdExpOverTensOfMillions) {
  std::mt19937_64 rng(20261129);
  const std::size_t n = 1 << 22;  // 4 Mi values per domain, 6 domains
  struct Domain {
    const char* name;
    double lo, hi;
  };
  const Domain domains[] = {
      {"whole range", -750.0, 712.0},
      {"softmax's x - max", -60.0, 0.0},
      {"|x| < 1", -1.0, 1.0},
      {"|x| < 1e-6", -1e-6, 1e-6},
      {"subnormal results", -745.2, -708.0},
      {"near overflow", 708.0, 709.8},
  };
  std::vector<double> xs(n);
  for (const Domain& d : domains) {
    std::uniform_real_distribution<double> u(d.lo, d.hi);
    for (auto& x : xs) x = u(rng);
    const std::int64_t worst = check_against_std(xs);
    std::printf("vexp vs std::exp on %-18s: at most %lld ulp\n", d.name,
                static_cast<long long>(worst));
  }
  // Random bit patterns: every exponent, NaNs and infinities included.
  for (auto& x : xs) x = std::bit_cast<double>(rng());
  std::printf("vexp vs std::exp on random bits       : at most %lld ulp\n",
              static_cast<long long>(check_against_std(xs)));
}

TEST(VecExp, SpecialValuesAndThresholdsAsStdExp) {
  const double dmin = std::numeric_limits<double>::denorm_min();
  std::vector<double> xs = {0.0,
                            -0.0,
                            k_inf,
                            -k_inf,
                            k_nan,
                            -k_nan,
                            dmin,
                            -dmin,
                            1e-300,
                            -1e-300,
                            1e300,
                            -1e300,
                            709.0,
                            710.0,
                            -746.0,
                            -745.0,
                            1.0,
                            -1.0,
                            std::numeric_limits<double>::max(),
                            std::numeric_limits<double>::lowest()};
  // Every double within 2^16 steps of the overflow and underflow thresholds and of the start of
  // the subnormal results.
  for (double t : {709.782712893384, -745.1332191019411, -708.3964185322641}) {
    double lo = t, hi = t;
    for (int i = 0; i < 1 << 16; ++i) {
      lo = std::nextafter(lo, -k_inf);
      hi = std::nextafter(hi, k_inf);
      xs.push_back(lo);
      xs.push_back(hi);
    }
  }
  while (xs.size() % 4) xs.push_back(0.0);
  check_against_std(xs);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(ops::vexp1(-k_inf)), 0u);  // +0
  EXPECT_EQ(ops::vexp1(k_inf), k_inf);
  EXPECT_EQ(ops::vexp1(0.0), 1.0);
  EXPECT_EQ(ops::vexp1(-0.0), 1.0);
  EXPECT_EQ(ops::vexp1(dmin), 1.0);
  EXPECT_EQ(ops::vexp1(709.79), k_inf);
  EXPECT_EQ(ops::vexp1(1e300), k_inf);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(ops::vexp1(-745.14)), 0u);
  EXPECT_EQ(ops::vexp1(-745.13), dmin);
  // A NaN comes back as that NaN (its payload kept, quieted), as std::exp returns it.
  const double payload = std::bit_cast<double>(std::uint64_t{0x7ff8000000001234});
  EXPECT_EQ(std::bit_cast<std::uint64_t>(ops::vexp1(payload)), 0x7ff8000000001234u);
}

// ---- the references against the plain loops they replaced ------------------------------------

// softmax / log_softmax of x seen as [outer, len, inner], as the reference computed it before
// (two std::exp per element, left-to-right sums).
void plain_softmax(const std::vector<double>& x, std::int64_t outer, std::int64_t len,
                   std::int64_t inner, bool log, std::vector<double>& out,
                   std::vector<double>& c_acc) {
  out.assign(x.size(), 0.0);
  c_acc.assign(x.size(), 0.0);
  auto at = [&](std::int64_t o, std::int64_t k, std::int64_t i) {
    return static_cast<std::size_t>((o * len + k) * inner + i);
  };
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      double m = -k_inf;
      bool nan = false;
      for (std::int64_t k = 0; k < len; ++k) {
        nan |= std::isnan(x[at(o, k, i)]);
        m = std::max(m, x[at(o, k, i)]);
      }
      if (nan) m = k_nan;
      double s = 0, w = 0, lo = 1.0;
      for (std::int64_t k = 0; k < len; ++k) {
        const double e = std::exp(x[at(o, k, i)] - m);
        s += e;
        lo = std::min(lo, e);
        if (e > 0) w += e * std::fabs(x[at(o, k, i)] - m);
      }
      // The sum's growth: near-equal terms (SumGrowth), repeated ones and absorbed ones.
      const double n = static_cast<double>(len);
      const double sqrt_len =
          std::max(ops::SumGrowth::growth(n, s / n, 1.0 - lo),
                   ops::SumGrowth::repeat_growth(len, [&](std::int64_t k) { return x[at(o, k, i)]; })) +
          ops::SumGrowth::absorbed(len, s, [&](std::int64_t k) { return std::exp(x[at(o, k, i)] - m); });
      const double lse = m + std::log(s);
      const double row_term =
          std::fabs(m) + std::fabs(lse) + 1.0 + sqrt_len + (std::isfinite(w / s) ? w / s : 0.0);
      for (std::int64_t k = 0; k < len; ++k) {
        const auto idx = at(o, k, i);
        const double v = x[idx], spread = std::fabs(v - m);
        if (log) {
          out[idx] = v - lse;
          c_acc[idx] = std::isfinite(lse) && std::isfinite(v) ? std::fabs(v) + row_term : 0.0;
        } else {
          out[idx] = std::exp(v - m) / s;
          c_acc[idx] = std::isfinite(spread) ? out[idx] * (2.0 + spread) * sqrt_len : 0.0;
        }
      }
    }
}

// layer_norm / rms_norm over the last dim, as the reference computed it before (left-to-right
// sums; the same corrected two-pass and condition terms).
void plain_norm(const std::vector<double>& x, std::int64_t len, const std::vector<double>& w,
                const std::vector<double>& b, double eps, double in_min_normal, bool centered,
                std::vector<double>& out, std::vector<double>& c_acc, std::vector<double>& c_in) {
  out.assign(x.size(), 0.0);
  c_acc.assign(x.size(), 0.0);
  c_in.assign(x.size(), 0.0);
  const double n = static_cast<double>(len);
  const double k_fp32_max = static_cast<double>(std::numeric_limits<float>::max());
  for (std::size_t r0 = 0; r0 < x.size(); r0 += static_cast<std::size_t>(len)) {
    const double* row = x.data() + r0;
    double mean = 0.0, abs_sum = 0.0, lo = k_inf, hi = 0.0, x_lo = k_inf, x_hi = -k_inf;
    for (std::int64_t k = 0; k < len; ++k) {
      mean += row[k], abs_sum += std::fabs(row[k]);
      lo = std::min(lo, std::fabs(row[k])), hi = std::max(hi, std::fabs(row[k]));
      x_lo = std::min(x_lo, row[k]), x_hi = std::max(x_hi, row[k]);
    }
    mean = centered ? mean / n : 0.0;
    double dev = 0.0, ssq = 0.0;
    for (std::int64_t k = 0; k < len; ++k) {
      const double d = row[k] - mean;
      dev += d;
      ssq += d * d;
    }
    if (centered && std::isfinite(dev)) {
      mean += dev / n;
      ssq -= dev * dev / n;
    }
    const double rstd = 1.0 / std::sqrt(ssq / n + eps);
    const double intermediate = std::max(abs_sum, ssq);
    const double mean_abs = centered ? abs_sum / n : 0.0;
    // The fp32 sum's growth over the row (SumGrowth: sqrt(len), more over near-equal terms).
    const double growth =
        centered ? std::max(ops::SumGrowth::growth(n, abs_sum / n, hi - lo),
                            ops::SumGrowth::repeat_growth(len, [row](std::int64_t k) { return row[k]; })) +
                       ops::SumGrowth::absorbed(len, abs_sum, [row](std::int64_t k) { return row[k]; })
                 : std::max(ops::SumGrowth::growth(n, ssq / n, hi * hi - lo * lo),
                            ops::SumGrowth::repeat_growth(len, [row](std::int64_t k) { return std::fabs(row[k]); })) +
                       ops::SumGrowth::absorbed(len, ssq,
                                                [row](std::int64_t k) { return row[k] * row[k]; });
    // The Welford variance's error (2 u range max|x|) bounds how large rstd may be computed.
    const double dvar = centered ? 2.0 * 0x1p-24 * (x_hi - x_lo) * hi : 0.0;
    double rstd_hi = rstd, d_rstd = 0.0;
    if (std::isfinite(dvar) && dvar > 0.0 && std::isfinite(ssq / n + eps) && ssq / n + eps > 0.0) {
      const double var = ssq / n, a = std::max(std::max(var - dvar, 0.0) + eps, 0x1p-149);
      rstd_hi = 1.0 / std::sqrt(a);
      // 1/sqrt(a) - 1/sqrt(var + eps) over var + eps - a, without cancelling, in units of u.
      const double drop = var - dvar > 0.0 ? dvar : var + eps - a;
      d_rstd = drop * rstd_hi * rstd / (std::sqrt(a) + std::sqrt(var + eps)) * 0x1p24;
    }
    // Downward: a two-pass variance from a mean off by delta = u mean|x| G is var + delta^2.
    if (centered && n > 1) {
      const double delta = 0x1p-24 * mean_abs * growth, b = ssq / n + eps, a = b + delta * delta;
      if (std::isfinite(a) && b > 0.0 && a > b)
        d_rstd = std::max(d_rstd, (a - b) / (std::sqrt(a) * std::sqrt(b) * (std::sqrt(a) + std::sqrt(b))) * 0x1p24);
    }
    // One element: the mean is exact, and only the folded affine's rounding of rstd * mean is left.
    const bool exact_mean = centered && n == 1;
    const double amp = exact_mean ? 0.0 : rstd_hi * growth,
                 c_base = (exact_mean ? mean_abs * rstd_hi : mean_abs * amp) +
                          0x1p-126 * (centered && !exact_mean ? 1.0 + rstd_hi : 1.0);
    const double floor_c =
        intermediate >= k_fp32_max / 4 && std::isfinite(intermediate) ? intermediate : 0.0;
    for (std::int64_t k = 0; k < len; ++k) {
      const std::size_t i = r0 + static_cast<std::size_t>(k);
      const double xh = (row[k] - mean) * rstd, y = xh * w[k] + b[k];
      const bool ok = std::isfinite(y);
      const double aw = std::fabs(w[k]);
      out[i] = y;
      c_acc[i] =
          ok ? std::max(aw * (std::fabs(row[k]) * amp + c_base + std::fabs(row[k] - mean) * d_rstd) +
                            std::fabs(b[k]),
                        floor_c)
             : 0.0;
      c_in[i] = ok ? std::fabs(xh * w[k]) + aw * in_min_normal : 0.0;
    }
  }
}

// got and want agree: the same special values (NaN, +-inf; the sign of a zero aside), finite
// values within `rel` of max(|want|, scale, scales[i]).
void expect_close(const RefVec& got, const std::vector<double>& want, double rel,
                  double scale_floor, const std::string& what,
                  const std::vector<double>& scales = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size() && reported < 5; ++i) {
    const double g = got[i], w = want[i];
    const double scale = std::max(scale_floor, scales.empty() ? 0.0 : scales[i]);
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::isfinite(g) &&
                                          std::fabs(g - w) <= rel * std::max(std::fabs(w), scale);
    if (!ok) {
      ADD_FAILURE() << what << " [" << i << "]: got " << g << ", the plain loops give " << w;
      ++reported;
    }
  }
}

// Values drawn from a normal law with an offset per row; some rows get special values.
std::vector<double> test_values(std::mt19937_64& rng, std::size_t n, std::int64_t row_len,
                                bool specials) {
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto row = static_cast<std::int64_t>(i) / std::max<std::int64_t>(row_len, 1);
    x[i] = static_cast<double>(static_cast<float>(normal(rng) + (row % 5 == 3 ? 1e4 : 0.0)));
  }
  if (!specials || n < 8) return x;
  // Row patterns: a NaN, a +inf, two +inf, a -inf, all -inf, a huge value.
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  for (double v : {k_nan, k_inf, k_inf, -k_inf, -k_inf, 3e38, -3e38}) x[pick(rng)] = v;
  if (row_len > 0 && static_cast<std::size_t>(row_len) <= n)
    for (std::int64_t k = 0; k < row_len; ++k) x[static_cast<std::size_t>(k)] = -k_inf;
  return x;
}

TEST(VecExp, SoftmaxFamilyMatchesThePlainLoops) {
  std::mt19937_64 rng(7);
  struct Case {
    Shape shape;
    std::int64_t dim;
  };
  const Case cases[] = {{{1}, -1},       {{4, 1}, -1},    {{3, 5}, -1},     {{7, 37}, -1},
                        {{5, 4096}, -1}, {{9, 1023}, -1}, {{2, 3, 7}, 1},   {{6, 5, 9}, 0},
                        {{64, 130}, 0},  {{3, 300}, 1},   {{2, 3, 4, 5}, 2}};
  for (bool log : {false, true}) {
    const char* op = log ? "log_softmax" : "softmax";
    for (const Case& c : cases)
      for (bool specials : {false, true}) {
        std::int64_t numel = 1;
        for (auto d : c.shape) numel *= d;
        const std::int64_t rank = static_cast<std::int64_t>(c.shape.size());
        const std::int64_t dim = c.dim < 0 ? c.dim + rank : c.dim;
        std::int64_t outer = 1, inner = 1;
        for (std::int64_t i = 0; i < dim; ++i) outer *= c.shape[i];
        for (std::int64_t i = dim + 1; i < rank; ++i) inner *= c.shape[i];
        const std::int64_t len = c.shape[dim];
        auto x = test_values(rng, static_cast<std::size_t>(numel), inner == 1 ? len : 0, specials);
        auto ctx = make_ctx(op, DType::float32, {{"x", arg(DType::float32, c.shape, x)}},
                            {{"dim", c.dim}});
        auto ref = builtin_of(op).reference(ctx);
        ASSERT_TRUE(ref.ok()) << ref.error().message;
        std::vector<double> out, c_acc;
        plain_softmax(x, outer, len, inner, log, out, c_acc);
        const std::string what = std::string(op) + " " + shape_to_string(c.shape) + " dim " +
                                 std::to_string(c.dim) + (specials ? " with specials" : "");
        // softmax values relative to themselves; log_softmax's v - lse relative to the magnitude
        // it cancels (|v| + |max| + |lse| + ...: its condition term), as the accuracy tests do.
        expect_close(ref->at(0).value, out, 1e-14, 1e-300, what + " value",
                     log ? c_acc : std::vector<double>{});
        expect_close(ref->at(0).c_acc, c_acc, 1e-14, 1e-300, what + " c_acc");
      }
  }
}

TEST(VecExp, LayerAndRmsNormMatchThePlainLoops) {
  std::mt19937_64 rng(11);
  const Shape shapes[] = {{1, 1},  {3, 3},    {4, 4},    {2, 7},
                          {6, 37}, {5, 1024}, {3, 4099}, {2, 3, 65}};
  for (bool rms : {false, true}) {
    const char* op = rms ? "rms_norm" : "layer_norm";
    for (const Shape& shape : shapes)
      for (bool specials : {false, true}) {
        const std::int64_t len = shape.back();
        std::int64_t numel = 1;
        for (auto d : shape) numel *= d;
        auto x = test_values(rng, static_cast<std::size_t>(numel), len, specials);
        std::normal_distribution<double> normal(1.0, 0.5);
        std::vector<double> w(static_cast<std::size_t>(len)), b(static_cast<std::size_t>(len));
        for (auto& v : w) v = static_cast<float>(normal(rng));
        for (auto& v : b) v = rms ? 0.0 : static_cast<double>(static_cast<float>(normal(rng)));
        if (specials && len > 2) w[1] = k_inf, w[2] = 0.0;
        std::map<std::string, RefArg, std::less<>> in = {{"x", arg(DType::bfloat16, shape, x)},
                                                         {"weight", arg(DType::float32, {len}, w)}};
        if (!rms) in["bias"] = arg(DType::float32, {len}, b);
        auto ctx = make_ctx(op, DType::bfloat16, std::move(in));
        auto ref = builtin_of(op).reference(ctx);
        ASSERT_TRUE(ref.ok()) << ref.error().message;
        std::vector<double> out, c_acc, c_in;
        plain_norm(x, len, w, b, ctx.attr_float("eps"), dtype_info(DType::bfloat16).min_normal,
                   !rms, out, c_acc, c_in);
        const std::string what =
            std::string(op) + " " + shape_to_string(shape) + (specials ? " with specials" : "");
        // The sums' order moves the statistics by a few ulps, which x_hat carries relative to its
        // scale (1: it is normalised), so x_hat * w relative to |w| (c_in is |x_hat * w| + ...).
        std::vector<double> abs_w(x.size());
        for (std::size_t i = 0; i < x.size(); ++i)
          abs_w[i] = std::fabs(w[i % static_cast<std::size_t>(len)]);
        expect_close(ref->at(0).value, out, 1e-12, 1.0, what + " value");
        expect_close(ref->at(0).c_acc, c_acc, 1e-12, 1e-300, what + " c_acc");
        expect_close(ref->at(0).c_in, c_in, 1e-12, 1e-300, what + " c_in", abs_w);
      }
  }
}

}  // namespace
}  // namespace gpuemu
