// rope: the two styles' exact semantics on hand-computed values, and the error model measured on
// every control and buggy kernel, positions from 0 to 10^6, theta 10^4 and 5·10^5.
#include "ops_b_harness.hpp"

namespace gpuemu::test_b {
namespace {

Json rope_attrs(double theta, const char* style, std::int64_t offset) {
  return Json::object({{"theta", theta}, {"style", style}, {"offset", offset}});
}

RefContext rope_ctx(DType dt, Shape shape, Json attrs, std::uint64_t seed,
                    std::function<double(Rng&, std::int64_t)> gen) {
  Rng rng(seed);
  RefContext ctx;
  ctx.case_dtype = dt;
  ctx.attrs = std::move(attrs);
  ctx.inputs["x"] = make_arg(dt, std::move(shape), rng, gen);
  return ctx;
}

TEST(OpsBRope, StylesOnHandValues) {
  // D = 4, one token at position 3 (offset 2, l = 1), theta = 100: frequencies 1 and 0.1.
  RefContext ctx;
  ctx.case_dtype = DType::float32;
  ctx.inputs["x"] = RefArg{DType::float32, {1, 2, 1, 4}, {0, 0, 0, 0, 1, 2, 3, 4}};
  ctx.attrs = rope_attrs(100.0, "half", 2);
  auto half = builtin("rope").reference(ctx);
  ASSERT_TRUE(half.ok()) << half.error().message;
  const double c0 = std::cos(3.0), s0 = std::sin(3.0), c1 = std::cos(0.3), s1 = std::sin(0.3);
  const std::vector<double> want_half = {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0,
                                         4 * c1 + 2 * s1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*half)[0].value[4 + i], want_half[i], 1e-15);
  ctx.attrs = rope_attrs(100.0, "interleaved", 2);
  auto inter = builtin("rope").reference(ctx);
  ASSERT_TRUE(inter.ok());
  const std::vector<double> want_inter = {1 * c0 - 2 * s0, 2 * c0 + 1 * s0, 3 * c1 - 4 * s1,
                                          4 * c1 + 3 * s1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*inter)[0].value[4 + i], want_inter[i], 1e-15);
  // Position 2 for the first token.
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*inter)[0].value[i], 0.0);
}

TEST(OpsBRope, Errors) {
  RefContext ctx;
  ctx.case_dtype = DType::float32;
  ctx.inputs["x"] = RefArg{DType::float32, {1, 1, 1, 3}, {1, 2, 3}};
  ctx.attrs = rope_attrs(10000.0, "half", 0);
  EXPECT_EQ(builtin("rope").reference(ctx).error().code, ErrorCode::shape_mismatch);
  ctx.inputs["x"] = RefArg{DType::float32, {1, 1, 1, 2}, {1, 2}};
  ctx.attrs = rope_attrs(10000.0, "neox", 0);
  EXPECT_EQ(builtin("rope").reference(ctx).error().code, ErrorCode::invalid_argument);
}

std::vector<Case> rope_cases(DType dt) {
  struct S {
    std::int64_t B, L, H, D;
    double theta;
    std::int64_t offset;
    bool outliers;
  };
  const std::vector<S> shapes = {
      {1, 1, 1, 2, 1e4, 0, false},        {2, 17, 3, 64, 1e4, 0, false},
      {1, 129, 2, 128, 1e4, 0, false},    {1, 64, 2, 80, 1e4, 4000, false},
      {1, 8, 1, 128, 1e4, 100000, false}, {1, 300, 1, 96, 5e5, 0, false},
      {1, 33, 2, 32, 1e4, 7, true},       {1, 16, 4, 6, 1e4, 1000000, false},
  };
  std::vector<Case> cases;
  std::uint64_t seed = 3000;
  for (const S& s : shapes)
    for (const char* style : {"half", "interleaved"}) {
      Case c;
      c.ctx = rope_ctx(dt, {s.B, s.L, s.H, s.D}, rope_attrs(s.theta, style, s.offset), seed++,
                       s.outliers ? outliers(1, 100) : normal(1));
      c.label =
          "B=" + std::to_string(s.B) + " L=" + std::to_string(s.L) + " H=" + std::to_string(s.H) +
          " D=" + std::to_string(s.D) + " theta=" + std::to_string(static_cast<long>(s.theta)) +
          " offset=" + std::to_string(s.offset) + " " + style + (s.outliers ? " outliers" : "");
      const std::int64_t max_pos = s.offset + s.L - 1;
      // Bugs that change the angle are visible while the fp32 angle itself is still good
      // (positions up to ~1e4; at 1e5-1e6 fp32 angles are legitimately off by ~1e-2 rad).
      const bool sharp = max_pos > 0 && max_pos <= 10000;
      if (s.D >= 4 && sharp) c.triggers.insert("style_swapped");
      if (sharp) c.triggers.insert("rotate_half_sign");
      if (s.D >= 4 && sharp) c.triggers.insert("theta_exponent_halved");
      if (max_pos > 64 && sharp) c.triggers.insert("positions_in_bf16");
      if (s.offset > 0 && sharp) c.triggers.insert("offset_ignored");
      cases.push_back(std::move(c));
    }
  return cases;
}

class OpsBRopeModel : public ::testing::TestWithParam<DType> {};

TEST_P(OpsBRopeModel, ControlsPassBugsCaught) {
  expect_verdicts(builtin("rope"), GetParam(), rope_cases(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(All, OpsBRopeModel, ::testing::ValuesIn(k_case_dtypes),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

}  // namespace
}  // namespace gpuemu::test_b
