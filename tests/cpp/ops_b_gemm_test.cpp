// matmul, bmm, linear: reference semantics, and the error model measured on every control and
// buggy kernel (controls <= 3, bugs > 20 on the shapes that trigger them).
#include "ops/gemm_blas.hpp"
#include "ops/gemm_emulation.hpp"
#include "ops_b_harness.hpp"

#include <limits>

namespace gpuemu::test_b {
namespace {

RefContext gemm_ctx(DType dt, std::map<std::string, RefArg> in) {
  RefContext ctx;
  ctx.case_dtype = dt;
  for (auto& [k, v] : in) ctx.inputs.emplace(k, std::move(v));
  return ctx;
}

TEST(OpsBGemm, MatmulSmallExact) {
  RefContext ctx = gemm_ctx(DType::float32, {});
  ctx.inputs["a"] = RefArg{DType::float32, {2, 3}, {1, 2, 3, 4, 5, 6}};
  ctx.inputs["b"] = RefArg{DType::float32, {3, 2}, {1, -1, 0, 2, -3, 0.5}};
  auto out = builtin("matmul").reference(ctx);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].shape, (Shape{2, 2}));
  EXPECT_EQ((*out)[0].value, (RefVec{-8, 4.5, -14, 9}));
  // c_acc = (|a|·|b|)·sqrt(3)
  EXPECT_NEAR((*out)[0].c_acc[0], 10 * std::sqrt(3.0), 1e-12);
  auto fast = ops::matmul_reference_value_only(ctx);
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ((*fast)[0].value, (*out)[0].value);
  EXPECT_TRUE((*fast)[0].c_acc.empty());
}

// The H200's tensor cores align a bf16 dot product on its operands' exponent fields, a subnormal
// counted at 2^-126 (evidence/gpu/tf32.md): a row [s, L, p] against a column [L, -s, q] (s = 2^-133,
// L = 2^127: products +-2^-6 that cancel) gives -15 * 2^-24 where the exact p*q is -15.75 * 2^-24,
// as next to products of +-2. That passes; the same output next to normal products of +-2^-6
// fails, and so does it for fp32 operands (no tensor-core alignment assumed there).
TEST(OpsBGemm, ATensorCoreAlignedOnASubnormalsExponentFieldPasses) {
  const double s = std::ldexp(1.0, -133), L = std::ldexp(1.0, 127);
  const double p = round_to(DType::bfloat16, 1.0 / 1024), q = round_to(DType::bfloat16, -15.75 * std::ldexp(1.0, -14));
  auto judge = [&](DType dt, double s_, double L_) {
    RefContext ctx = gemm_ctx(dt, {});
    ctx.inputs["a"] = RefArg{dt, {1, 3}, {s_, L_, p}};
    ctx.inputs["b"] = RefArg{dt, {3, 1}, {L_, -s_, q}};
    auto out = builtin("matmul").reference(ctx);
    EXPECT_TRUE(out.ok());
    EXPECT_DOUBLE_EQ((*out)[0].value[0], p * q);
    return max_normalised_error((*out)[0], {-15.0 * std::ldexp(1.0, -24)}, dt);
  };
  EXPECT_DOUBLE_EQ(p * q, -15.75 * std::ldexp(1.0, -24));
  EXPECT_LE(judge(DType::bfloat16, s, L), 2.0);
  EXPECT_GT(judge(DType::bfloat16, std::ldexp(1.0, -6), 1.0), 2.0);  // normal products of +-2^-6
  EXPECT_GT(judge(DType::float32, s, L), 2.0);
}

// A dot product of equal products is a running sum over equal terms: its roundings add one-signed
// (torch 1.13's fp32 GEMV with a and b expanded, K = 193, erred by 2.98 of the √K envelope). Its
// c_acc grows as SumGrowth's G(K), and a sequential fp32 loop over it passes; varied rows keep √K.
TEST(OpsBGemm, EqualProductsGrowLikeARunningSumAndVariedOnesKeepRootK) {
  const std::int64_t K = 1024, N = 3;
  RefContext ctx = gemm_ctx(DType::float32, {});
  ctx.inputs["a"] = RefArg{DType::float32, {1, K}, RefVec(K, static_cast<double>(1.1f))};
  RefVec b(static_cast<std::size_t>(K * N));
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t j = 0; j < N; ++j) b[k * N + j] = static_cast<double>(j == 2 ? 0.3f * (1 + k % 7) : 0.7f);
  ctx.inputs["b"] = RefArg{DType::float32, {K, N}, b};
  auto out = builtin("matmul").reference(ctx);
  ASSERT_TRUE(out.ok());
  const RefOutput& r = (*out)[0];
  const double abs_dot0 = static_cast<double>(1.1f) * static_cast<double>(0.7f) * K;
  EXPECT_GT(r.c_acc[0], abs_dot0 * (K / 2.0));            // equal products: about K/2 + √K
  EXPECT_LT(r.c_acc[0], abs_dot0 * (K / 2.0 + 33.0));
  double abs_dot2 = 0.0;
  for (std::int64_t k = 0; k < K; ++k) abs_dot2 += static_cast<double>(1.1f) * b[k * N + 2];
  EXPECT_NEAR(r.c_acc[2], abs_dot2 * 32.0, 1e-9 * abs_dot2);  // products 7 apart: √K
  std::vector<double> loop(N);
  for (std::int64_t j = 0; j < N; ++j) {
    float acc = 0.0f;
    for (std::int64_t k = 0; k < K; ++k) acc += 1.1f * static_cast<float>(b[k * N + j]);
    loop[static_cast<std::size_t>(j)] = acc;
  }
  EXPECT_LT(max_normalised_error(r, loop, DType::float32), 2.0);
  // ... which the √K bound alone did not admit
  RefOutput root_k = r;
  root_k.c_acc[0] = abs_dot0 * 32.0;
  EXPECT_GT(max_normalised_error(root_k, loop, DType::float32), 2.0);
}

TEST(OpsBGemm, SpecialValuesPropagateLikeIeee) {
  const double inf = std::numeric_limits<double>::infinity();
  RefContext ctx = gemm_ctx(DType::float32, {});
  ctx.inputs["a"] = RefArg{DType::float32, {2, 2}, {inf, 1, 1, 1}};
  ctx.inputs["b"] = RefArg{DType::float32, {2, 2}, {0, 1, 1, std::nan("")}};
  auto out = builtin("matmul").reference(ctx);
  ASSERT_TRUE(out.ok());
  const auto& v = (*out)[0].value;
  EXPECT_TRUE(std::isnan(v[0]));  // inf·0 + 1·1
  EXPECT_TRUE(std::isnan(v[1]));  // inf·1 + 1·NaN
  EXPECT_EQ(v[2], 1.0);           // 1·0 + 1·1
  EXPECT_TRUE(std::isnan(v[3]));
}

TEST(OpsBGemm, ShapeErrors) {
  RefContext ctx = gemm_ctx(DType::float32, {});
  ctx.inputs["a"] = RefArg{DType::float32, {2, 3}, RefVec(6)};
  ctx.inputs["b"] = RefArg{DType::float32, {2, 2}, RefVec(4)};
  auto out = builtin("matmul").reference(ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::shape_mismatch);
}

TEST(OpsBGemm, LinearMatchesLoops) {
  Rng rng(7);
  RefContext ctx = gemm_ctx(DType::float32, {});
  ctx.inputs["x"] = make_arg(DType::float32, {2, 3, 5}, rng, normal(1));
  ctx.inputs["weight"] = make_arg(DType::float32, {4, 5}, rng, normal(1));
  ctx.inputs["bias"] = make_arg(DType::float32, {4}, rng, normal(1));
  auto out = builtin("linear").reference(ctx);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].shape, (Shape{2, 3, 4}));
  const auto& x = ctx.input("x").data;
  const auto& w = ctx.input("weight").data;
  const auto& b = ctx.input("bias").data;
  for (int r = 0; r < 6; ++r)
    for (int n = 0; n < 4; ++n) {
      double s = b[n];
      for (int k = 0; k < 5; ++k) s += x[r * 5 + k] * w[n * 5 + k];
      EXPECT_NEAR((*out)[0].value[r * 4 + n], s, 1e-12 * (1 + std::fabs(s)));
    }
}

TEST(OpsBGemm, RoundLowpMatchesRoundTo) {
  Rng rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float x =
        static_cast<float>(std::ldexp(rng.normal(), static_cast<int>(rng.integer(-30, 20))));
    for (DType d : {DType::float16, DType::bfloat16})
      ASSERT_EQ(ops::round_lowp(d, x), static_cast<float>(round_to(d, x))) << x;
  }
}

struct GemmShape {
  std::int64_t batch, M, K, N;
  std::function<double(Rng&, std::int64_t)> gen_a, gen_b;
  const char* values;
  bool bias = false;
};

std::vector<Case> gemm_cases(std::string_view op, DType dt) {
  const auto pos = uniform(0, 1);
  std::vector<GemmShape> shapes = {
      {2, 17, 1, 9, normal(1), normal(1), "normal"},
      {3, 33, 127, 31, normal(1), normal(1), "normal"},
      {2, 16, 129, 40, normal(1), normal(1), "normal"},
      {2, 9, 1000, 24, normal(1), normal(1), "normal"},
      {1, 8, 4096, 16, pos, pos, "uniform[0,1)"},
      {2, 6, 4097, 8, outliers(1, 100), outliers(1, 100), "outliers x100"},
      {2, 48, 64, 48, normal(1000), normal(1e-3), "scaled 1e3/1e-3"},
      {1, 5, 2048, 7, normal(1, 3), normal(1, 1), "offset means"},
  };
  std::vector<Case> cases;
  std::uint64_t seed = 100;
  for (auto& s : shapes) {
    for (bool with_bias : {false, true}) {
      if (with_bias && op != "linear") continue;
      Rng rng(seed++);
      Case c;
      c.ctx.case_dtype = dt;
      if (op == "matmul") {
        c.ctx.inputs["a"] = make_arg(dt, {s.M, s.K}, rng, s.gen_a);
        c.ctx.inputs["b"] = make_arg(dt, {s.K, s.N}, rng, s.gen_b);
      } else if (op == "bmm") {
        c.ctx.inputs["a"] = make_arg(dt, {s.batch, s.M, s.K}, rng, s.gen_a);
        c.ctx.inputs["b"] = make_arg(dt, {s.batch, s.K, s.N}, rng, s.gen_b);
      } else {
        c.ctx.inputs["x"] = make_arg(dt, {s.batch, s.M, s.K}, rng, s.gen_a);
        c.ctx.inputs["weight"] = make_arg(dt, {s.N, s.K}, rng, s.gen_b);
        if (with_bias) c.ctx.inputs["bias"] = make_arg(dt, {s.N}, rng, normal(1));
      }
      c.label = "B=" + std::to_string(s.batch) + " M=" + std::to_string(s.M) +
                " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N) + " " + s.values +
                (with_bias ? " +bias" : "");
      if (s.K > 32) c.triggers.insert("acc_overwrite");
      // A dropped tail of one product among thousands hides under the sum's own condition; the
      // bug is visible when the tail is a real part of the sum.
      if (s.K % 32 != 0 && s.K <= 1024) c.triggers.insert("dropped_tail_k");
      // A 16-bit accumulator shows on long sums. With large offset means (|sum| ~ 3K) fp16's
      // own output rounding is already coarse and the bug measures only 15-30: a thin margin,
      // kept out of the assertion (the long uniform and outlier cases stay in).
      if (s.K >= 1000 && std::string(s.values) != "offset means")
        c.triggers.insert("low_precision_acc");
      if (s.batch > 1) c.triggers.insert("batch_offset_missing");
      // A bias added once per tile is visible unless the product dwarfs it (offset means: |x·Wᵀ|
      // ~ 6000 against a bias ~ 1).
      if (with_bias && s.K > 32 && std::string(s.values) != "offset means")
        c.triggers.insert("bias_per_tile");
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

class OpsBGemmModel : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(OpsBGemmModel, ControlsPassBugsCaught) {
  const auto& [op, dt] = GetParam();
  expect_verdicts(builtin(op), dt, gemm_cases(op, dt));
}

INSTANTIATE_TEST_SUITE_P(All, OpsBGemmModel,
                         ::testing::Combine(::testing::Values("matmul", "bmm", "linear"),
                                            ::testing::ValuesIn(k_case_dtypes)),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) + "_" +
                                  std::string(dtype_name(std::get<1>(param_info.param)));
                         });

}  // namespace
}  // namespace gpuemu::test_b
