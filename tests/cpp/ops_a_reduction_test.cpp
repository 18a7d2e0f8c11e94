// Reductions (sum, mean, amax, argmax, logsumexp, l2norm, cumsum): torch semantics on special
// values and ties, and the error model measured on controls and known-buggy kernels over dtypes,
// short/odd/long rows, both reduced dims and value distributions (see ops_a_harness.hpp).
#include "ops/lowp_emu.hpp"
#include "ops_a_harness.hpp"

namespace gpuemu::test_a {
namespace {

// The rows every reduction runs: [R, N] over dim -1 with N = 1, 3, 129, 1000, 8192, and a
// [N, R] tensor over dim 0 (the reduced dim strided).
struct RowShape {
  std::int64_t rows, len;
  bool dim0;
};
const std::vector<RowShape> k_row_shapes = {{64, 1, false},    {33, 3, false},   {31, 129, false},
                                            {17, 1000, false}, {4, 8192, false}, {7, 1000, true}};

using Fill = std::function<std::vector<double>(Rng&, std::int64_t, DType)>;

struct Distribution {
  std::string name;
  Fill fill;
};

std::vector<Distribution> base_distributions() {
  return {
      {"normal(0,1)", [](Rng& r, std::int64_t n, DType d) { return normal_values(r, n, 0, 1, d); }},
      {"uniform(0.5,1.5)",
       [](Rng& r, std::int64_t n, DType d) { return uniform_values(r, n, 0.5, 1.5, d); }},
      {"wide 1e-3..1e3",
       [](Rng& r, std::int64_t n, DType d) { return wide_values(r, n, -3, 3, d); }},
      // Near-constant terms: correlated rounding, the worst case for long fp32 chains.
      {"near-constant 0.1",
       [](Rng& r, std::int64_t n, DType d) { return normal_values(r, n, 0.1, 1e-6, d); }},
      {"special",
       [](Rng& r, std::int64_t n, DType d) {
         auto v = normal_values(r, n, 0, 2, d);
         sprinkle_specials(v, r, 200);
         return v;
       }},
  };
}

std::vector<Scenario> scenarios(const std::string& op, const std::vector<Distribution>& dists,
                                const Json& attrs = Json::object()) {
  std::vector<Scenario> out;
  for (DType dt : k_dtypes) {
    Rng rng(derive_seed(0x7ed, op + std::string(dtype_name(dt)) + attrs.dump()));
    for (const auto& rs : k_row_shapes)
      for (const auto& d : dists) {
        const Shape shape = rs.dim0 ? Shape{rs.len, rs.rows} : Shape{rs.rows, rs.len};
        Json a = attrs;
        a["dim"] = rs.dim0 ? 0 : -1;
        out.push_back(
            {d.name + " " + shape_to_string(shape) + " dim=" + (rs.dim0 ? "0" : "-1"),
             make_ctx(op, dt, {{"x", arg(dt, shape, d.fill(rng, shape_numel(shape), dt))}}, a)});
      }
  }
  return out;
}

std::vector<Exemption> fp32_na(const std::string& kernel) {
  return {{kernel, DType::float32,
           "an fp32 input dtype makes the 'low-precision' accumulator fp32: correct"}};
}

TEST(OpsAReduction, SpecialValuesAndTiesFollowTorch) {
  // torch 1.13 float64 on these rows.
  const std::vector<double> rows = {1, k_nan,  3,      k_nan,  k_inf,  -k_inf, 1,
                                    2, -k_inf, -k_inf, -k_inf, -k_inf, k_inf,  1,
                                    2, 3,      2,      5,      5,      1};
  auto ctx = [&](const std::string& op) {
    return make_ctx(op, DType::float32, {{"x", arg(DType::float64, {5, 4}, rows)}});
  };
  auto val = [&](const std::string& op) { return builtin_of(op).reference(ctx(op))->at(0).value; };
  const auto amax = val("amax"), argmax = val("argmax"), lse = val("logsumexp"), sum = val("sum");
  EXPECT_TRUE(std::isnan(amax[0]));
  EXPECT_EQ(amax[1], k_inf);
  EXPECT_EQ(amax[2], -k_inf);
  EXPECT_EQ(amax[4], 5.0);
  EXPECT_EQ(argmax, (RefVec{1, 0, 0, 0, 1}));  // first NaN; first of tied maxima
  EXPECT_TRUE(std::isnan(lse[0]));
  EXPECT_EQ(lse[1], k_inf);
  EXPECT_EQ(lse[2], -k_inf);
  EXPECT_EQ(lse[3], k_inf);
  EXPECT_NEAR(lse[4], 5.726631620430614, 1e-12);
  EXPECT_TRUE(std::isnan(sum[0]) && std::isnan(sum[1]));
  EXPECT_EQ(sum[2], -k_inf);
  EXPECT_EQ(sum[4], 13.0);
  const auto l2 = val("l2norm");
  EXPECT_TRUE(std::isnan(l2[4]) && std::isnan(l2[5]) && l2[6] == 0.0 && std::isnan(l2[12]) &&
              l2[13] == 0.0);
  EXPECT_NEAR(l2[17], 0.674199862463242, 1e-15);
  const auto cs = val("cumsum");
  EXPECT_EQ(cs[16], 2.0);
  EXPECT_EQ(cs[19], 13.0);
  EXPECT_TRUE(std::isnan(cs[5]));
  // Condition terms are 0, not NaN, where the reference is not finite.
  for (const std::string op : {"sum", "mean", "logsumexp", "l2norm", "cumsum"}) {
    auto ref = builtin_of(op).reference(ctx(op));
    for (std::size_t i = 0; i < ref->at(0).value.size(); ++i) {
      const double c = ref->at(0).c_acc[i];
      EXPECT_TRUE(std::isfinite(c)) << op << " " << i;
      if (!std::isfinite(ref->at(0).value[i])) {
        EXPECT_EQ(c, 0.0) << op << " " << i;
      }
    }
  }
  // l2norm of a zero row is 0 (eps clamp); keepdim keeps the reduced dim as 1.
  auto z = builtin_of("l2norm").reference(make_ctx(
      "l2norm", DType::float32, {{"x", arg(DType::float32, {2, 3}, std::vector<double>(6))}}));
  EXPECT_EQ(z->at(0).value, RefVec(6, 0.0));
  auto kd = builtin_of("sum").reference(
      make_ctx("sum", DType::float32, {{"x", arg(DType::float32, {2, 3}, {1, 2, 3, 4, 5, 6})}},
               {{"dim", 0}, {"keepdim", true}}));
  EXPECT_EQ(kd->at(0).shape, (Shape{1, 3}));
  EXPECT_EQ(kd->at(0).value, (RefVec{5, 7, 9}));
  EXPECT_EQ(builtin_of("argmax").reference(ctx("argmax"))->at(0).dtype, DType::int64);
}

TEST(OpsAReduction, Sum) {
  score_op("sum", scenarios("sum", base_distributions()), fp32_na("lowp_accumulator"));
}
TEST(OpsAReduction, Mean) {
  score_op("mean", scenarios("mean", base_distributions()), fp32_na("lowp_accumulator"));
}

std::vector<Distribution> max_distributions() {
  auto d = base_distributions();
  d.push_back({"all negative",
               [](Rng& r, std::int64_t n, DType t) { return normal_values(r, n, -5, 1, t); }});
  d.push_back({"ties", [](Rng& r, std::int64_t n, DType t) {
                 auto v = normal_values(r, n, 0, 2, t);
                 for (auto& x : v) x = std::nearbyint(x);
                 return v;
               }});
  return d;
}

TEST(OpsAReduction, Amax) {
  score_op("amax", scenarios("amax", max_distributions()));
}

// The verdict's argmax rule (see reduction_ops.cpp): an index is right when it is the
// reference's, or its value is tied with the maximum within input rounding, or both are NaN.
double argmax_error(const RefContext& ctx, const std::vector<RefOutput>& ref,
                    const std::vector<std::vector<double>>& out) {
  const RefArg& x = ctx.input("x");
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  std::int64_t dim = ctx.attr_int("dim");
  if (dim < 0) dim += rank;
  std::int64_t len = x.shape[dim], inner = 1;
  for (std::int64_t d = dim + 1; d < rank; ++d) inner *= x.shape[d];
  const double u_in = dtype_info(x.dtype).unit_roundoff;
  for (std::size_t e = 0; e < out[0].size(); ++e) {
    const auto o = static_cast<std::int64_t>(e) / inner, i = static_cast<std::int64_t>(e) % inner;
    const auto chosen = static_cast<std::int64_t>(out[0][e]),
               want = static_cast<std::int64_t>(ref[0].value[e]);
    if (chosen == want) continue;
    if (chosen < 0 || chosen >= len) return k_inf;
    const double a = x.data[(o * len + chosen) * inner + i],
                 m = x.data[(o * len + want) * inner + i];
    if (!((std::isnan(m) && std::isnan(a)) || (!std::isnan(m) && a >= m - u_in * std::fabs(m))))
      return k_inf;
  }
  return 0.0;
}

TEST(OpsAReduction, Argmax) {
  score_op("argmax", scenarios("argmax", max_distributions()), {}, {}, argmax_error);
}

TEST(OpsAReduction, Logsumexp) {
  auto d = base_distributions();
  d.push_back({"logits N(0,10)",
               [](Rng& r, std::int64_t n, DType t) { return normal_values(r, n, 0, 10, t); }});
  d.push_back({"large 100+N(0,5)",
               [](Rng& r, std::int64_t n, DType t) { return normal_values(r, n, 100, 5, t); }});
  d.push_back({"late spike", [](Rng& r, std::int64_t n, DType t) {
                 auto v = normal_values(r, n, 0, 1, t);
                 for (std::size_t k = v.size() * 3 / 4; k < v.size(); k += 7)
                   v[k] = round_to(t, 30.0);
                 return v;
               }});
  score_op("logsumexp", scenarios("logsumexp", d), fp32_na("lowp_sum"));
}

TEST(OpsAReduction, L2norm) {
  auto d = base_distributions();
  d.push_back({"tiny 1e-7..1e-6",
               [](Rng& r, std::int64_t n, DType t) { return wide_values(r, n, -7, -6, t); }});
  d.push_back({"offset 1000+N(0,1)",
               [](Rng& r, std::int64_t n, DType t) { return normal_values(r, n, 1000, 1, t); }});
  score_op("l2norm", scenarios("l2norm", d), fp32_na("lowp_accumulator"));
}

TEST(OpsAReduction, Cumsum) {
  score_op("cumsum", scenarios("cumsum", base_distributions()), fp32_na("lowp_running_sum"));
}

// A single-thread fp32 loop over the row (one thread per row, the kernel a CUDA author writes
// first) is a correct kernel. Over rows of equal or near-equal terms (an expanded, stride-0 row;
// a large offset over a tiny spread) its running sum rounds the same way for long stretches and the
// error grows like len, not sqrt(len): the error model's SumGrowth term (docs/error-model.md,
// "Correlated rounding") must admit it, without admitting a low-precision accumulator there, and
// must leave rows of varied terms at sqrt(len).
TEST(OpsAReduction, SingleThreadLoopsOverNearEqualRowsPass) {
  Rng rng(20261201);
  struct Row {
    std::string label;
    std::vector<double> x;
  };
  auto fp32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  auto near_equal = [&](std::int64_t n, double c, double spread) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = fp32(c + spread * rng.uniform(-1.0, 1.0));
    return v;
  };
  // One dominant term first, then terms in [lo, hi]: below half an ulp of the running sum, each
  // is dropped whole (a logit row with one clear winner; a sum of one large value and many small).
  auto dominant = [&](std::int64_t n, double first, double lo, double hi) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = fp32(k == 0 ? first : rng.uniform(lo, hi));
    return v;
  };
  double worst_old_sum = 0.0;
  for (const std::int64_t n : {439, 3819, 8192}) {
    const std::vector<Row> rows = {{"equal", near_equal(n, -0.0996891, 0.0)},
                                   {"offset 5242.88 +- 0.03", near_equal(n, -5242.88, 0.03)},
                                   {"offset 786.43 +- 0.012", near_equal(n, 786.43, 0.012)},
                                   {"varied N(0,1)", normal_values(rng, n, 0.0, 1.0, DType::float32)},
                                   // Absorbed terms: most of the exp(x - max) of a wide row, and
                                   // most |x| beside a few spikes, are within an ulp or two of
                                   // the running sum: they round one-signed however varied.
                                   {"dominant logit", dominant(n, 0.0, -20.0, -17.5)},
                                   {"dominant value", dominant(n, 1e6, 0.01, 0.03)}};
    for (const Row& row : rows) {
      const auto ctx = [&](const std::string& op) {
        return make_ctx(op, DType::float32, {{"x", arg(DType::float32, {1, n}, row.x)}});
      };
      std::vector<float> xf(row.x.begin(), row.x.end());
      float m = xf[0];
      for (float v : xf) m = std::max(m, v);
      // The loops, each with an fp32 running sum in row order.
      float sum = 0.0f, ss = 0.0f, se = 0.0f, lowp = 0.0f;
      std::vector<double> cumsum, l2(xf.size()), softmax(xf.size());
      for (float v : xf) {
        sum += v;
        cumsum.push_back(sum);
        ss += v * v;
        se += std::exp(v - m);
        lowp = static_cast<float>(round_to(DType::bfloat16, static_cast<double>(lowp + v)));
      }
      const float norm = std::max(std::sqrt(ss), 1e-12f);
      for (std::size_t k = 0; k < xf.size(); ++k) {
        l2[k] = xf[k] / norm;
        softmax[k] = std::exp(xf[k] - m) / se;
      }
      const std::vector<std::pair<std::string, std::vector<double>>> outs = {
          {"sum", {sum}},
          {"mean", {sum / static_cast<float>(n)}},
          {"cumsum", cumsum},
          {"l2norm", l2},
          {"logsumexp", {std::log(se) + m}},
          {"softmax", softmax}};
      for (const auto& [op, out] : outs) {
        const auto ref = builtin_of(op).reference(ctx(op));
        ASSERT_TRUE(ref) << op;
        const double err = max_error(*ref, {out}, DType::float32);
        EXPECT_LE(err, 2.0) << op << " single-thread loop, " << row.label << ", len " << n;
      }
      // A bf16 running sum is a bug on every row: far past the envelope on the near-equal ones
      // (where the term is large), past it on the varied ones.
      const bool varied = row.label.starts_with("varied");
      const bool near_equal_row = row.label == "equal" || row.label.starts_with("offset");
      const auto ref = builtin_of("sum").reference(ctx("sum"));
      EXPECT_GT(max_error(*ref, {{lowp}}, DType::float32), near_equal_row ? k_bug_floor : 2.0)
          << row.label << " " << n;
      // Rows of varied terms keep sqrt(len): the correlated term costs no power there. Only the
      // few terms within an ulp or two of the sum (|x| <= 2u sum|x|) add their min(|x|, u sum|x|).
      double abs_sum = 0.0;
      for (double v : row.x) abs_sum += std::fabs(v);
      if (varied) {
        double absorbed = 0.0;
        for (double v : row.x)
          if (std::fabs(v) <= 2.0 * k_u_fp32 * abs_sum)
            absorbed += std::min(std::fabs(v), k_u_fp32 * abs_sum);
        absorbed /= k_u_fp32 * abs_sum;
        EXPECT_LT(absorbed, 0.1 * std::sqrt(static_cast<double>(n)));
        EXPECT_NEAR(ref->at(0).c_acc[0], abs_sum * (std::sqrt(static_cast<double>(n)) + absorbed),
                    1e-12 * ref->at(0).c_acc[0]);
      }
      // What the sqrt(len) model alone made of the loop's sum.
      const double old_c = abs_sum * std::sqrt(static_cast<double>(n));
      worst_old_sum = std::max(worst_old_sum, std::fabs(sum - ref->at(0).value[0]) /
                                                  (k_u_fp32 * (std::fabs(ref->at(0).value[0]) + old_c)));
    }
  }
  // The loop's sum failed the sqrt(len) model alone: this test would catch the term's removal.
  EXPECT_GT(worst_old_sum, 2.0);
}

// repeat_growth counts in one pass over a hash table: the same sqrt(sum over the distinct values
// of count^2) as sorting a copy and counting runs (+0 and -0 one value, non-finite ones skipped).
TEST(OpsAReduction, RepeatGrowthIsTheRootOfTheSquaredCountsOfTheDistinctValues) {
  Rng rng(47);
  for (const std::int64_t n : {0, 1, 2, 7, 100, 4097}) {
    for (const int distinct : {1, 3, 50, 1 << 20}) {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = static_cast<double>(rng.integer(0, distinct - 1)) * 0.25 - 1.0;
      if (n > 4) v[1] = -0.0, v[2] = 0.0, v[3] = k_nan, v[4] = -k_inf;
      std::vector<double> f;
      for (double x : v)
        if (std::isfinite(x)) f.push_back(x);
      std::sort(f.begin(), f.end());
      double squares = 0.0;
      for (std::size_t i = 0; i < f.size();) {
        std::size_t j = i;
        while (j < f.size() && f[j] == f[i]) ++j;
        squares += static_cast<double>((j - i) * (j - i));
        i = j;
      }
      EXPECT_EQ(ops::SumGrowth::repeat_growth(n, [&](std::int64_t k) { return v[static_cast<std::size_t>(k)]; }),
                std::sqrt(squares))
          << n << " values, " << distinct << " distinct";
    }
  }
}

// Rows of repeated values (issue 47's formulation patterns draw them: many equal logits beside one
// dominant one, a nearly constant row at an offset with a few deviations) make a single-thread fp32
// loop's running sum err one-signed on every copy of a value: sqrt(len) does not bound it, the
// repeats' growth does (docs/error-model.md, "Repeated terms"). Before softmax, log_softmax,
// cross_entropy and the norms took it, the softmax row below failed at 3.9 (test_client.py's
// numpy softmax along dim 0: 127 logits of -3818.09 beside one of -3803.68) and the layer_norm row
// at 8.4 (a two-pass loop over 12,227 copies of 1592.38 and four deviations of 16 to 64). The
// one-pass variance E[x^2] - E[x]^2, a formulation bug, still fails there.
TEST(OpsAReduction, SingleThreadLoopsOverRepeatedTermsPass) {
  const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  for (const std::int64_t n : {128, 1025, 4096}) {
    // softmax, log_softmax and logsumexp of c repeated and one c + 14.41, the dominant one first
    std::vector<double> x(static_cast<std::size_t>(n), f32(-3818.0947265625));
    x[4] = f32(-3803.68432617);
    std::vector<float> xf(x.begin(), x.end());
    float m = *std::max_element(xf.begin(), xf.end()), se = 0.0f;
    for (float v : xf) se += std::exp(v - m);
    std::vector<double> sm(x.size()), lsm(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) {
      sm[k] = std::exp(xf[k] - m) / se;
      lsm[k] = xf[k] - m - std::log(se);
    }
    const auto ctx = [&](const std::string& op) {
      return make_ctx(op, DType::float32, {{"x", arg(DType::float32, {1, n}, x)}});
    };
    for (const auto& [op, out] : std::vector<std::pair<std::string, std::vector<double>>>{
             {"softmax", sm}, {"log_softmax", lsm}, {"logsumexp", {std::log(se) + m}}}) {
      const auto ref = builtin_of(op).reference(ctx(op));
      ASSERT_TRUE(ref) << op;
      EXPECT_LE(max_error(*ref, {out}, DType::float32), 2.0) << op << " single-thread loop, len " << n;
    }
  }
  // layer_norm: a nearly constant row at an offset, a two-pass loop (correct) and a one-pass one
  for (const std::int64_t n : {1024, 12231}) {
    std::vector<double> x(static_cast<std::size_t>(n), 1592.38427734375);
    x[10] = 1528.38427734375, x[20] = 1544.38427734375, x[30] = 1560.38427734375, x[40] = 1656.38427734375;
    std::vector<float> xf(x.begin(), x.end());
    float s = 0.0f, ss = 0.0f, s2 = 0.0f;
    for (float v : xf) s += v, s2 += v * v;
    const float mu = s / static_cast<float>(n);
    for (float v : xf) ss += (v - mu) * (v - mu);
    const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(n) + 1e-5f);
    const float var1 = std::max(s2 / static_cast<float>(n) - mu * mu, 0.0f);
    const float rstd1 = 1.0f / std::sqrt(var1 + 1e-5f);
    std::vector<double> two_pass(x.size()), one_pass(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) {
      two_pass[k] = (xf[k] - mu) * rstd;
      one_pass[k] = (xf[k] - mu) * rstd1;
    }
    const auto ctx = make_ctx("layer_norm", DType::float32, {{"x", arg(DType::float32, {1, n}, x)}});
    const auto ref = builtin_of("layer_norm").reference(ctx);
    ASSERT_TRUE(ref);
    EXPECT_LE(max_error(*ref, {two_pass}, DType::float32), 2.0) << "two-pass loop, len " << n;
    // The one-pass variance fails both rows. At 12,231 the two-pass loop's own mean is off by about
    // sigma (u mean|x| G = 1.2 against sigma 0.97: var + delta^2 may double the variance), so the
    // bound must admit a variance that far off, and the one-pass one fails by less there (2.4).
    EXPECT_GT(max_error(*ref, {one_pass}, DType::float32), n > 4096 ? 2.0 : 10.0) << "one-pass variance, len " << n;
  }
}

}  // namespace
}  // namespace gpuemu::test_a
