// fp8_quantize and scaled_fp8_matmul: saturation and special values, the matmul semantics, and
// the error model measured on every control and buggy kernel.
#include "ops_b_harness.hpp"

#include <limits>

namespace gpuemu::test_b {
namespace {

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

RefContext quant_ctx(DType dt, Shape shape, double scale, std::uint64_t seed,
                     std::function<double(Rng&, std::int64_t)> gen) {
  Rng rng(seed);
  RefContext ctx;
  ctx.case_dtype = dt;
  ctx.inputs["x"] = make_arg(dt, std::move(shape), rng, gen);
  ctx.inputs["scale"] = RefArg{DType::float32, {}, {round_to(DType::float32, scale)}};
  return ctx;
}

TEST(OpsBQuant, SaturatesAndPropagatesNaN) {
  RefContext ctx;
  ctx.case_dtype = DType::float32;
  ctx.inputs["x"] = RefArg{DType::float32, {6}, {k_nan, k_inf, -k_inf, 1e6, -0.0, 3.0}};
  ctx.inputs["scale"] = RefArg{DType::float32, {}, {2.0}};
  const BuiltinOp& op = builtin("fp8_quantize");
  auto ref = op.reference(ctx);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ((*ref)[0].dtype, DType::float8_e4m3fn);
  const auto& v = (*ref)[0].value;
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 448.0);
  EXPECT_EQ(v[2], -448.0);
  EXPECT_EQ(v[3], 448.0);
  EXPECT_TRUE(v[4] == 0.0 && std::signbit(v[4]));
  EXPECT_EQ(v[5], 1.5);
  for (const auto& k : op.controls) {
    auto out = k.run(ctx);
    ASSERT_TRUE(out.ok());
    EXPECT_TRUE(std::isnan((*out)[0][0])) << k.name;
    EXPECT_EQ((*out)[0][1], 448.0) << k.name;
    EXPECT_EQ((*out)[0][2], -448.0) << k.name;
    EXPECT_EQ((*out)[0][3], 448.0) << k.name;
    EXPECT_TRUE(std::signbit((*out)[0][4])) << k.name;
    EXPECT_EQ((*out)[0][5], 1.5) << k.name;
    EXPECT_EQ(max_normalised_error((*ref)[0], (*out)[0], DType::float32), 0.0) << k.name;
  }
  auto bad = kernel(op.buggy, "no_saturation").run(ctx);
  EXPECT_TRUE(std::isnan((*bad)[0][1]));  // Inf / 2 cast without saturation
  EXPECT_EQ(max_normalised_error((*ref)[0], (*bad)[0], DType::float32), k_inf);
}

std::vector<Case> quantize_cases(DType dt) {
  struct S {
    std::int64_t R, N;
    double scale;
    std::function<double(Rng&, std::int64_t)> gen;
    const char* values;
    double max_abs;  // about the largest |x| drawn
  };
  const std::vector<S> shapes = {
      {1, 1, 1.0, normal(1), "normal", 4},
      {7, 129, 0.25, normal(100), "normal(100)", 400},
      {16, 64, 4.0 / 448.0, normal(1), "normal, amax scale", 4},
      {3, 1000, 2.5, outliers(1, 1000, 32), "outliers x1000", 4000},
      {4, 33, 0.37, normal(1e-3), "normal(1e-3) (e4m3 subnormals)", 4e-3},
      {2, 513, 16.0, normal(2000), "normal(2000)", 8000},
  };
  std::vector<Case> cases;
  std::uint64_t seed = 5000;
  for (const S& s : shapes) {
    Case c;
    c.ctx = quant_ctx(dt, {s.R, s.N}, s.scale, seed++, s.gen);
    c.label = "R=" + std::to_string(s.R) + " N=" + std::to_string(s.N) +
              " scale=" + std::to_string(s.scale) + " " + s.values;
    double amax = 0;
    for (double x : c.ctx.input("x").data) amax = std::max(amax, std::fabs(x));
    const double q = amax / s.scale;
    if (q > 464) c.triggers.insert("no_saturation");
    // x·scale vs x/scale: visible where the quotients are normal e4m3 values.
    if (s.scale != 1.0 && q > 0.1) c.triggers.insert("multiply_by_scale");
    if ((amax > 448 && s.scale != 1.0) || q > 464) c.triggers.insert("clamp_before_scale");
    cases.push_back(std::move(c));
  }
  return cases;
}

class OpsBQuantize : public ::testing::TestWithParam<DType> {};

// The output is e4m3 (u = 2^-4): an output wrong by 100% of |ref| (0, or half or double the
// reference) scores only 1/u = 16, so a bug whose output stays within a factor of a few of the
// reference cannot reach 20. The floor here is 8, four times the envelope's own floor of 2.
TEST_P(OpsBQuantize, ControlsPassBugsCaught) {
  expect_verdicts(builtin("fp8_quantize"), GetParam(), quantize_cases(GetParam()), 3.0, 8.0);
}

INSTANTIATE_TEST_SUITE_P(All, OpsBQuantize, ::testing::ValuesIn(k_case_dtypes),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

RefContext fp8_ctx(std::int64_t M, std::int64_t K, std::int64_t N, double sa, double sb, DType out,
                   std::uint64_t seed, std::function<double(Rng&, std::int64_t)> gen) {
  Rng rng(seed);
  RefContext ctx;
  ctx.case_dtype = DType::float8_e4m3fn;
  ctx.attrs = Json::object({{"out_dtype", std::string(dtype_name(out))}});
  ctx.inputs["a"] = make_arg(DType::float8_e4m3fn, {M, K}, rng, gen);
  ctx.inputs["b"] = make_arg(DType::float8_e4m3fn, {K, N}, rng, gen);
  ctx.inputs["scale_a"] = RefArg{DType::float32, {}, {round_to(DType::float32, sa)}};
  ctx.inputs["scale_b"] = RefArg{DType::float32, {}, {round_to(DType::float32, sb)}};
  return ctx;
}

TEST(OpsBQuant, ScaledMatmulSemantics) {
  RefContext ctx = fp8_ctx(1, 2, 1, 0.5, 4.0, DType::float32, 1, normal(1));
  ctx.inputs["a"].data = {2.0, -3.0};
  ctx.inputs["b"].data = {0.5, 1.5};
  auto ref = builtin("scaled_fp8_matmul").reference(ctx);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  EXPECT_EQ((*ref)[0].dtype, DType::float32);
  EXPECT_EQ((*ref)[0].value[0], (1.0 - 4.5) * 2.0);
  ctx.attrs["out_dtype"] = "int8";
  EXPECT_EQ(builtin("scaled_fp8_matmul").reference(ctx).error().code, ErrorCode::invalid_argument);
  ctx.attrs["out_dtype"] = nullptr;  // the default
  EXPECT_EQ((*builtin("scaled_fp8_matmul").reference(ctx))[0].dtype, DType::bfloat16);
}

std::vector<Case> fp8_matmul_cases(DType out) {
  struct S {
    std::int64_t M, K, N;
    double sa, sb;
    std::function<double(Rng&, std::int64_t)> gen;
    const char* values;
  };
  const std::vector<S> shapes = {
      {3, 1, 5, 1.0, 1.0, normal(30), "normal(30)"},
      {16, 127, 33, 0.01, 0.5, normal(30), "normal(30)"},
      {8, 1000, 16, 1.0 / (448.0 * 448.0), 2.0, uniform(0, 448), "uniform[0,448)"},
      {5, 4096, 7, 0.001, 3.0, normal(30), "normal(30)"},
      {32, 64, 32, 0.02, 0.02, uniform(-448, 448), "uniform(-448,448)"},
      {4, 2048, 9, 1.0, 0.125, uniform(0, 2), "uniform[0,2)"},
  };
  std::vector<Case> cases;
  std::uint64_t seed = 6000;
  for (const S& s : shapes) {
    Case c;
    c.ctx = fp8_ctx(s.M, s.K, s.N, s.sa, s.sb, out, seed++, s.gen);
    c.label = "M=" + std::to_string(s.M) + " K=" + std::to_string(s.K) +
              " N=" + std::to_string(s.N) + " sa=" + std::to_string(s.sa) +
              " sb=" + std::to_string(s.sb) + " " + s.values;
    if (s.sb != 1.0) c.triggers.insert("missing_scale_b");
    if (s.sa * s.sb != 1.0) c.triggers.insert("scales_divided");
    if (s.K > 64) c.triggers.insert("acc_overwrite");
    if (s.K >= 1000) c.triggers.insert("low_precision_acc");
    cases.push_back(std::move(c));
  }
  return cases;
}

class OpsBScaledFp8Matmul : public ::testing::TestWithParam<DType> {};

TEST_P(OpsBScaledFp8Matmul, ControlsPassBugsCaught) {
  expect_verdicts(builtin("scaled_fp8_matmul"), GetParam(), fp8_matmul_cases(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(OutDtypes, OpsBScaledFp8Matmul,
                         ::testing::Values(DType::bfloat16, DType::float16, DType::float32),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

}  // namespace
}  // namespace gpuemu::test_b
