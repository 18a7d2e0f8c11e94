// Elementwise ops (relu ... rsqrt, add, mul, swiglu, geglu): torch semantics on special values,
// and the error model measured on controls and known-buggy kernels over dtypes, shapes and
// magnitudes (see ops_a_harness.hpp).
#include "ops_a_harness.hpp"

namespace gpuemu::test_a {
namespace {

// torch 1.13 (float64) on these inputs, printed by torch itself.
const std::vector<double> k_special_x = {k_nan, k_inf, -k_inf, -0.0,   0.0,  25.0,
                                         -25.0, 20.0,  20.5,   -100.0, -1e-5};
const std::map<std::string, std::vector<double>> k_torch_special = {
    {"relu", {k_nan, k_inf, 0, -0.0, 0, 25, 0, 20, 20.5, 0, 0}},
    {"leaky_relu", {k_nan, k_inf, -k_inf, -0.0, 0, 25, -0.25, 20, 20.5, -1, -1e-7}},
    {"gelu", {k_nan, k_inf, k_nan, -0.0, 0, 25, -0.0, 20, 20.5, -0.0, -4.999960105771961e-06}},
    {"silu",
     {k_nan, k_inf, k_nan, -0.0, 0, 24.9999999996528, -3.4719859661927863e-10, 19.999999958776925,
      20.499999974371867, -3.720075976020836e-42, -4.999975000000001e-06}},
    {"sigmoid",
     {k_nan, 1, 0, 0.5, 0.5, 0.999999999986112, 1.3887943864771144e-11, 0.9999999979388463,
      0.9999999987498471, 3.7200759760208356e-44, 0.49999750000000004}},
    {"tanh", {k_nan, 1, -1, -0.0, 0, 1, -1, 1, 1, -1, -9.999999999666668e-06}},
    {"elu",
     {k_nan, k_inf, -1, 0, 0, 25, -0.9999999999861121, 20, 20.5, -1, -9.999950000172397e-06}},
    {"softplus",
     {k_nan, k_inf, 0, 0.6931471805599453, 0.6931471805599453, 25, 1.3887943864867583e-11,
      20.000000002061153, 20.5, 3.720075976020836e-44, 0.6931421805724453}},
    {"exp",
     {k_nan, k_inf, 0, 1, 1, 72004899337.38588, 1.3887943864964021e-11, 485165195.4097903,
      799902177.4755054, 3.720075976020836e-44, 0.9999900000499998}},
    {"log",
     {k_nan, k_inf, k_nan, -k_inf, -k_inf, 3.2188758248682006, k_nan, 2.995732273553991,
      3.0204248861443626, k_nan, k_nan}},
    {"sqrt",
     {k_nan, k_inf, k_nan, -0.0, 0, 5, k_nan, 4.47213595499958, 4.527692569068709, k_nan, k_nan}},
    {"rsqrt",
     {k_nan, 0, k_nan, -k_inf, k_inf, 0.2, k_nan, 0.22360679774997896, 0.22086305214969307, k_nan,
      k_nan}},
};

void expect_same(double got, double want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got;
  } else if (want == 0.0 && std::isfinite(got) && got != 0.0) {
    // torch's float64 formulas cancel to 0 where the true value is below 1e-100 (gelu(-25) is
    // -7.6e-137); the reference keeps the true value.
    EXPECT_LT(std::fabs(got), 1e-100) << what;
  } else if (std::isinf(want) || want == 0.0) {
    EXPECT_EQ(got, want) << what;
    if (std::isinf(want) || std::signbit(want)) {
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << what << " sign";
    }
  } else {
    EXPECT_NEAR(got, want, 1e-12 * std::fabs(want)) << what;
  }
}

TEST(OpsAElementwise, SpecialValuesFollowTorch) {
  for (const auto& [op, want] : k_torch_special) {
    const auto n = static_cast<std::int64_t>(k_special_x.size());
    auto ctx = make_ctx(op, DType::float32, {{"x", arg(DType::float64, {n}, k_special_x)}});
    auto ref = builtin_of(op).reference(ctx);
    ASSERT_TRUE(ref.ok()) << op;
    for (std::size_t i = 0; i < want.size(); ++i) {
      expect_same(ref->at(0).value[i], want[i], op + "(" + std::to_string(k_special_x[i]) + ")");
      if (ref->at(0).exact) {  // relu: bound zero, no condition term at all
        EXPECT_TRUE(ref->at(0).c_acc.empty() && ref->at(0).c_in.empty()) << op;
        continue;
      }
      const double c = ref->at(0).c_acc[i];
      EXPECT_TRUE(std::isfinite(c) && c >= 0) << op << " c_acc at " << i;
      if (!std::isfinite(want[i])) {
        EXPECT_EQ(c, 0.0) << op << " c_acc must be 0 at non-finite " << i;
      }
    }
  }
  // gelu's tanh form, softplus's threshold (strictly greater) with beta = 2.
  auto g = builtin_of("gelu").reference(
      make_ctx("gelu", DType::float32, {{"x", arg(DType::float64, {3}, {-k_inf, 1.0, -3.0})}},
               {{"approximate", "tanh"}}));
  expect_same(g->at(0).value[0], k_nan, "gelu_tanh(-inf)");
  expect_same(g->at(0).value[1], 0.8411919906082768, "gelu_tanh(1)");
  expect_same(g->at(0).value[2], -0.0036373920817729943, "gelu_tanh(-3)");
  auto sp = builtin_of("softplus")
                .reference(make_ctx("softplus", DType::float32,
                                    {{"x", arg(DType::float64, {3}, {10.0, 10.5, 9.9})}},
                                    {{"beta", 2.0}, {"threshold", 20.0}}));
  expect_same(sp->at(0).value[0], 10.000000001030577, "softplus_b2(10)");
  expect_same(sp->at(0).value[1], 10.5, "softplus_b2(10.5)");
  expect_same(sp->at(0).value[2], 9.90000000125875, "softplus_b2(9.9)");
}

enum class Domain { real, positive, nonnegative };

// The scenarios every unary op runs: regular, wide magnitudes, tiny and huge values, short and
// odd-sized shapes (numel not a multiple of 1024), and special values.
std::vector<Scenario> unary_scenarios(const std::string& op, Domain domain, const Json& attrs,
                                      std::uint64_t seed) {
  std::vector<Scenario> out;
  for (DType dt : k_dtypes) {
    Rng rng(derive_seed(seed, std::string(dtype_name(dt))));
    auto add = [&](const std::string& label, Shape shape, std::vector<double> v) {
      if (domain != Domain::real)
        for (auto& x : v) {
          x = std::fabs(x);
          if (domain == Domain::positive && x == 0.0) x = dtype_info(dt).min_subnormal;
        }
      out.push_back({label + " " + shape_to_string(shape) + " " + attrs.dump(),
                     make_ctx(op, dt, {{"x", arg(dt, shape, std::move(v))}}, attrs)});
    };
    add("normal(0,1)", {7, 1000}, normal_values(rng, 7000, 0, 1, dt));
    add("normal(0,4)", {3, 129}, normal_values(rng, 387, 0, 4, dt));
    add("wide 1e-3..1e3", {16, 4099}, wide_values(rng, 16 * 4099, -3, 3, dt));
    add("tiny 1e-7..1e-3", {5, 333}, wide_values(rng, 5 * 333, -7, -3, dt));
    add("one element", {1, 1}, wide_values(rng, 1, -1, 1, dt));
    add("large 10..1e4", {2, 517}, wide_values(rng, 2 * 517, 1, 4, dt));
    auto sp = normal_values(rng, 9 * 301, 0, 3, dt);
    sprinkle_specials(sp, rng);
    add("special", {9, 301}, std::move(sp));
  }
  return out;
}

void run_unary(const std::string& op, Domain domain, std::vector<Json> attr_sets,
               const std::vector<Exemption>& exemptions = {}) {
  std::vector<Scenario> all;
  std::uint64_t seed = 1;
  for (const auto& a : attr_sets) {
    auto s = unary_scenarios(op, domain, a, derive_seed(0x5eed, op + std::to_string(seed++)));
    for (auto& x : s) all.push_back(std::move(x));
  }
  score_op(op, all, exemptions);
}

const Json k_default = Json::object();

TEST(OpsAElementwise, Relu) {
  // fmaxf(NaN, 0) = 0 only differs on NaN inputs (the special scenario).
  run_unary("relu", Domain::real, {k_default});
}
TEST(OpsAElementwise, LeakyRelu) {
  run_unary("leaky_relu", Domain::real, {k_default, {{"negative_slope", 0.2}}});
}
TEST(OpsAElementwise, Gelu) {
  // 0.044 for 0.044715 moves the tanh form by < 1% where |gelu| > 0.01; below that float16's
  // absolute floor (its smallest normal, 6.1e-5) dominates, so in float16 the bug peaks near 6.
  run_unary("gelu", Domain::real, {k_default, {{"approximate", "tanh"}}},
            {{"tanh_const_0044", DType::float16,
              "a < 1% change where |gelu| exceeds fp16's 6.1e-5 floor"}});
}
TEST(OpsAElementwise, Silu) {
  run_unary("silu", Domain::real, {k_default});
}
TEST(OpsAElementwise, Sigmoid) {
  run_unary("sigmoid", Domain::real, {k_default});
}
TEST(OpsAElementwise, Tanh) {
  run_unary("tanh", Domain::real, {k_default});
}
TEST(OpsAElementwise, Elu) {
  run_unary("elu", Domain::real, {k_default, {{"alpha", 0.5}}});
}
TEST(OpsAElementwise, Softplus) {
  run_unary("softplus", Domain::real, {k_default, {{"beta", 2.0}, {"threshold", 10.0}}});
}
TEST(OpsAElementwise, Exp) {
  run_unary("exp", Domain::real, {k_default});
}
TEST(OpsAElementwise, Log) {
  run_unary("log", Domain::positive, {k_default});
}
TEST(OpsAElementwise, Sqrt) {
  // sqrt(x + 1e-6) moves sqrt(0) to 1e-3: 16x float16's absolute floor (caught, under the margin).
  run_unary("sqrt", Domain::nonnegative, {k_default},
            {{"eps_added", DType::float16, "at most 1e-3 = 16x fp16's smallest normal, at x = 0"}});
}
TEST(OpsAElementwise, Rsqrt) {
  run_unary("rsqrt", Domain::positive, {k_default});
}

TEST(OpsAElementwise, BroadcastingFollowsTorch) {
  // [3, 1, 4] + [2, 1] -> [3, 2, 4]; mul of [2, 3] by a rank-1 [3].
  std::vector<double> a(12), b = {10, 20};
  for (int i = 0; i < 12; ++i) a[i] = i;
  auto ref = builtin_of("add").reference(
      make_ctx("add", DType::float32,
               {{"a", arg(DType::float32, {3, 1, 4}, a)}, {"b", arg(DType::float32, {2, 1}, b)}}));
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->at(0).shape, (Shape{3, 2, 4}));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(ref->at(0).value[(i * 2 + j) * 4 + k], a[i * 4 + k] + b[j]);
  auto m =
      builtin_of("mul").reference(make_ctx("mul", DType::float32,
                                           {{"a", arg(DType::float32, {2, 3}, {1, 2, 3, 4, 5, 6})},
                                            {"b", arg(DType::float32, {3}, {k_inf, 0, -1})}}));
  ASSERT_TRUE(m.ok());
  expect_same(m->at(0).value[0], k_inf, "1*inf");
  expect_same(m->at(0).value[1], 0.0, "2*0");
  expect_same(m->at(0).value[5], -6.0, "6*-1");
  EXPECT_EQ(m->at(0).c_acc[0], 0.0);
  auto bad = builtin_of("add").reference(
      make_ctx("add", DType::float32,
               {{"a", arg(DType::float32, {2, 3}, std::vector<double>(6))},
                {"b", arg(DType::float32, {2}, {1, 2})}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::shape_mismatch);
}

void run_binary(const std::string& op) {
  std::vector<Scenario> all;
  for (DType dt : k_dtypes) {
    Rng rng(derive_seed(0xb1, op + std::string(dtype_name(dt))));
    const std::int64_t R = 13, N = 517;
    for (const Shape& bs : {Shape{R, N}, Shape{R, 1}, Shape{1, N}, Shape{1, 1}, Shape{N}}) {
      for (int values = 0; values < 4; ++values) {
        const std::int64_t nb = shape_numel(bs);
        std::vector<double> a, b;
        std::string what;
        if (values == 0) {
          a = normal_values(rng, R * N, 0, 1, dt), b = normal_values(rng, nb, 0, 1, dt),
          what = "normal";
        } else if (values == 1) {
          a = wide_values(rng, R * N, -3, 3, dt), b = wide_values(rng, nb, -3, 3, dt),
          what = "wide";
        } else if (values == 2) {
          // Past float16's range where the dtype allows (1e3..1e6), and below its normals.
          const double hi = dt == DType::float16 ? 4 : 6;
          a = wide_values(rng, R * N, -7, hi, dt), b = wide_values(rng, nb, -7, hi, dt),
          what = "extreme";
        } else {
          a = normal_values(rng, R * N, 0, 2, dt), b = normal_values(rng, nb, 0, 2, dt),
          what = "special";
          sprinkle_specials(a, rng);
          sprinkle_specials(b, rng);
        }
        all.push_back(
            {what + " b" + shape_to_string(bs),
             make_ctx(op, dt,
                      {{"a", arg(dt, {R, N}, std::move(a))}, {"b", arg(dt, bs, std::move(b))}})});
      }
    }
  }
  // float16 math on float16 inputs is the correct arithmetic.
  score_op(op, all,
           {{"fp16_math", DType::float16, "float16 arithmetic on float16 inputs is correct"}});
}

TEST(OpsAElementwise, Add) {
  run_binary("add");
}
TEST(OpsAElementwise, Mul) {
  run_binary("mul");
}

void run_gated(const std::string& op, std::vector<Json> attr_sets) {
  std::vector<Scenario> all;
  for (const auto& attrs : attr_sets)
    for (DType dt : k_dtypes) {
      Rng rng(derive_seed(0x6a7e, op + attrs.dump() + std::string(dtype_name(dt))));
      for (const Shape& s : {Shape{7, 1000}, Shape{1, 1}, Shape{33, 129}}) {
        const std::int64_t n = shape_numel(s);
        for (int values = 0; values < 4; ++values) {
          std::vector<double> g, u;
          std::string what;
          if (values == 3) {
            // The dtype's edges: subnormal and tiny gates times near-max ups (underflowed
            // activations amplified), and the reverse.
            const auto& info = dtype_info(dt);
            const double edges[] = {info.min_subnormal, info.min_normal, 3 * info.min_subnormal,
                                    info.max_finite / 4, 1.0};
            g.resize(n), u.resize(n);
            for (std::int64_t k = 0; k < n; ++k) {
              g[k] = (rng.chance(1, 2) ? 1 : -1) * edges[rng.bounded(5)];
              u[k] = (rng.chance(1, 2) ? 1 : -1) * edges[rng.bounded(5)];
            }
            what = "edges";
          } else if (values == 0)
            g = normal_values(rng, n, 0, 2, dt), u = normal_values(rng, n, 0, 1, dt),
            what = "normal";
          else if (values == 1)
            g = wide_values(rng, n, -3, 2, dt), u = wide_values(rng, n, -2, 2, dt), what = "wide";
          else {
            g = normal_values(rng, n, 0, 3, dt), u = normal_values(rng, n, 0, 1, dt),
            what = "special";
            sprinkle_specials(g, rng);
            sprinkle_specials(u, rng);
          }
          all.push_back(
              {what + " " + shape_to_string(s) + " " + attrs.dump(),
               make_ctx(op, dt,
                        {{"gate", arg(dt, s, std::move(g))}, {"up", arg(dt, s, std::move(u))}},
                        attrs)});
        }
      }
    }
  // act(gate) * Inf is NaN where a kernel's activation is exactly 0 and +-Inf elsewhere. The
  // reference follows PyTorch's fp32 formulas; unfused kernels store the activation in the input
  // dtype, where it can underflow sooner (fp16: |act| < 3e-8) and turn a +-Inf into NaN.
  const std::string unfused = "0 * Inf = NaN after the activation underflows in the input dtype";
  score_op(op, all, {},
           {{"unfused_rounded", "special", DType::float16, unfused},
            {"unfused_rounded", "special", DType::bfloat16, unfused}});
}

TEST(OpsAElementwise, Swiglu) {
  run_gated("swiglu", {k_default});
}
TEST(OpsAElementwise, Geglu) {
  run_gated("geglu", {k_default, {{"approximate", "tanh"}}});
}

}  // namespace
}  // namespace gpuemu::test_a
