// conv1d and conv2d: the reference against a direct fp64 loop (strides, padding, dilation, groups,
// pairs), shape errors, and the error model measured on every control and buggy kernel.
#include "ops_b_harness.hpp"

namespace gpuemu::test_b {
namespace {

struct ConvSpec {
  std::int64_t B, Cin, H, W, Cout, Kh, Kw;
  std::vector<std::int64_t> stride, padding, dilation;
  std::int64_t groups;
  bool bias;
  const char* values;  // normal | outliers | uniform | bias_heavy (x, w in [0, 1), bias ~ N(0, 100))
};

// conv1d uses H = Kh = 1 and only the last entry of stride/padding/dilation.
RefContext conv_ctx(DType dt, int sd, const ConvSpec& s, std::uint64_t seed) {
  Rng rng(seed);
  RefContext ctx;
  ctx.case_dtype = dt;
  auto attr = [&](const std::vector<std::int64_t>& v) {
    return sd == 2 ? Json(v) : Json(std::vector<std::int64_t>{v.back()});
  };
  ctx.attrs = Json::object({{"stride", attr(s.stride)},
                            {"padding", attr(s.padding)},
                            {"dilation", attr(s.dilation)},
                            {"groups", s.groups}});
  const std::string vals = s.values;
  auto gen = vals == "outliers"                           ? outliers(1, 100)
             : vals == "uniform" || vals == "bias_heavy" ? uniform(0, 1)
                                                         : normal(1);
  const Shape xs = sd == 2 ? Shape{s.B, s.Cin, s.H, s.W} : Shape{s.B, s.Cin, s.W};
  const Shape ws =
      sd == 2 ? Shape{s.Cout, s.Cin / s.groups, s.Kh, s.Kw} : Shape{s.Cout, s.Cin / s.groups, s.Kw};
  ctx.inputs["x"] = make_arg(dt, xs, rng, gen);
  ctx.inputs["weight"] = make_arg(dt, ws, rng, gen);
  if (s.bias) ctx.inputs["bias"] = make_arg(dt, {s.Cout}, rng, normal(vals == "bias_heavy" ? 100 : 1));
  return ctx;
}

// Direct fp64 convolution (PyTorch's definition), as [B, Cout, Hout, Wout].
std::vector<double> conv_loops(const RefContext& ctx, const ConvSpec& s, int sd, std::int64_t& Ho,
                               std::int64_t& Wo) {
  const auto& x = ctx.input("x").data;
  const auto& w = ctx.input("weight").data;
  const std::int64_t H = sd == 2 ? s.H : 1, Kh = sd == 2 ? s.Kh : 1;
  const std::int64_t sh = sd == 2 ? s.stride[0] : 1, ph = sd == 2 ? s.padding[0] : 0,
                     dh = sd == 2 ? s.dilation[0] : 1;
  const std::int64_t sw = s.stride.back(), pw = s.padding.back(), dw = s.dilation.back();
  Ho = (H + 2 * ph - dh * (Kh - 1) - 1) / sh + 1;
  Wo = (s.W + 2 * pw - dw * (s.Kw - 1) - 1) / sw + 1;
  const std::int64_t cg = s.Cin / s.groups, og = s.Cout / s.groups;
  std::vector<double> out;
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t co = 0; co < s.Cout; ++co)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          double acc = s.bias ? ctx.input("bias").data[co] : 0.0;
          const std::int64_t grp = co / og;
          for (std::int64_t ci = 0; ci < cg; ++ci)
            for (std::int64_t kh = 0; kh < Kh; ++kh)
              for (std::int64_t kw = 0; kw < s.Kw; ++kw) {
                const std::int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= s.W) continue;
                acc += w[((co * cg + ci) * Kh + kh) * s.Kw + kw] *
                       x[((b * s.Cin + grp * cg + ci) * H + ih) * s.W + iw];
              }
          out.push_back(acc);
        }
  return out;
}

const std::vector<ConvSpec>& conv2d_specs() {
  static const std::vector<ConvSpec> v = {
      {1, 1, 1, 1, 1, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, false, "normal"},
      {2, 3, 17, 13, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true, "normal"},
      {1, 16, 9, 9, 4, 3, 3, {2, 2}, {2, 2}, {2, 2}, 1, true, "normal"},
      {1, 8, 12, 12, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 4, false, "normal"},
      {1, 64, 8, 8, 16, 5, 5, {1, 1}, {2, 2}, {1, 1}, 1, true, "outliers"},
      {2, 6, 7, 10, 6, 2, 3, {2, 1}, {1, 0}, {1, 2}, 3, true, "normal"},
      {1, 130, 4, 4, 3, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false, "uniform"},
      // depthwise, the bias far above the taps: an accumulator started at the bias (PyTorch's CUDA
      // depthwise kernel, control bias_first_fma) rounds all 20 partial sums at the bias's size
      {4, 3, 60, 16, 30, 4, 5, {3, 3}, {0, 3}, {1, 1}, 3, true, "bias_heavy"},
  };
  return v;
}

const std::vector<ConvSpec>& conv1d_specs() {
  static const std::vector<ConvSpec> v = {
      {1, 1, 1, 1, 1, 1, 1, {1}, {0}, {1}, 1, false, "normal"},
      {2, 4, 1, 129, 6, 1, 3, {1}, {1}, {1}, 1, true, "normal"},
      {1, 32, 1, 100, 8, 1, 5, {3}, {4}, {2}, 1, true, "normal"},
      {2, 8, 1, 64, 8, 1, 3, {1}, {1}, {1}, 8, true, "normal"},
      {1, 256, 1, 40, 4, 1, 4, {1}, {0}, {1}, 1, false, "outliers"},
      {1, 12, 1, 33, 6, 1, 7, {2}, {3}, {1}, 3, true, "uniform"},
  };
  return v;
}

TEST(OpsBConv, ReferenceMatchesDirectLoops) {
  for (int sd : {1, 2}) {
    std::uint64_t seed = 1;
    for (const ConvSpec& s : sd == 2 ? conv2d_specs() : conv1d_specs()) {
      RefContext ctx = conv_ctx(DType::float32, sd, s, seed++);
      auto out = builtin(sd == 2 ? "conv2d" : "conv1d").reference(ctx);
      ASSERT_TRUE(out.ok()) << out.error().message;
      std::int64_t Ho = 0, Wo = 0;
      const auto want = conv_loops(ctx, s, sd, Ho, Wo);
      const Shape shape = sd == 2 ? Shape{s.B, s.Cout, Ho, Wo} : Shape{s.B, s.Cout, Wo};
      EXPECT_EQ((*out)[0].shape, shape);
      ASSERT_EQ((*out)[0].value.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR((*out)[0].value[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << i;
    }
  }
}

TEST(OpsBConv, PaddingTakesNoPartAndTheExplicitZerosNaNIsAnAlternative) {
  // conv1d over x[1,1,4] with padding 1 and weight [1,1,3] = {Inf, 1, 1}: output 0 puts the Inf
  // tap on the padding (explicit zeros: 0·Inf = NaN; implicit padding: x0 + x1); output 1 puts it
  // on x0 (Inf for every formulation).
  ConvSpec s{1, 1, 1, 4, 1, 1, 3, {1}, {1}, {1}, 1, false, "normal"};
  RefContext ctx = conv_ctx(DType::float32, 1, s, 9);
  auto& x = ctx.inputs["x"].data;
  x = {1.0, 2.0, 3.0, 4.0};
  ctx.inputs["weight"].data = {std::numeric_limits<double>::infinity(), 1.0, 1.0};
  auto out = builtin("conv1d").reference(ctx);
  ASSERT_TRUE(out.ok()) << out.error().message;
  const RefOutput& r = (*out)[0];
  EXPECT_DOUBLE_EQ(r.value[0], 3.0);  // x0 + x1, the padded tap left out
  EXPECT_TRUE(std::isinf(r.value[1]));
  ASSERT_EQ(r.alt_nonfinite.size(), 4u);
  EXPECT_EQ(r.alt_nonfinite[0], k_alt_nan);
  EXPECT_EQ(r.alt_nonfinite[1], 0);
  EXPECT_TRUE(std::isfinite(r.c_acc[0]));
}

TEST(OpsBConv, ShapeErrors) {
  ConvSpec s{1, 4, 1, 5, 4, 1, 7, {1}, {0}, {1}, 1, false, "normal"};
  RefContext ctx = conv_ctx(DType::float32, 1, s, 1);  // kernel 7 > input 5
  EXPECT_EQ(builtin("conv1d").reference(ctx).error().code, ErrorCode::shape_mismatch);
  s.padding = {1};
  EXPECT_TRUE(builtin("conv1d").reference(conv_ctx(DType::float32, 1, s, 1)).ok());
  RefContext g =
      conv_ctx(DType::float32, 1, {1, 4, 1, 9, 4, 1, 3, {1}, {0}, {1}, 2, false, "normal"}, 1);
  g.attrs["groups"] = 3;  // 4 channels in 3 groups
  EXPECT_EQ(builtin("conv1d").reference(g).error().code, ErrorCode::shape_mismatch);
}

std::vector<Case> conv_cases(int sd, DType dt) {
  std::vector<Case> cases;
  std::uint64_t seed = 4000;
  for (const ConvSpec& s : sd == 2 ? conv2d_specs() : conv1d_specs()) {
    Case c;
    c.ctx = conv_ctx(dt, sd, s, seed++);
    const std::int64_t Kh = sd == 2 ? s.Kh : 1;
    const std::int64_t R = s.Cin / s.groups * Kh * s.Kw;
    auto pair = [](const std::vector<std::int64_t>& v) {
      return std::to_string(v.front()) + (v.size() > 1 ? "," + std::to_string(v.back()) : "");
    };
    c.label = "B=" + std::to_string(s.B) + " Cin=" + std::to_string(s.Cin) +
              (sd == 2 ? " H=" + std::to_string(s.H) : "") + " W=" + std::to_string(s.W) +
              " Cout=" + std::to_string(s.Cout) +
              " K=" + (sd == 2 ? std::to_string(s.Kh) + "x" : "") + std::to_string(s.Kw) +
              " s=" + pair(s.stride) + " p=" + pair(s.padding) + " d=" + pair(s.dilation) +
              " g=" + std::to_string(s.groups) + " " + s.values;
    const bool padded = (sd == 2 && s.padding[0] > 0) || s.padding.back() > 0;
    const bool dilated =
        (sd == 2 && s.dilation[0] > 1 && s.Kh > 1) || (s.dilation.back() > 1 && s.Kw > 1);
    if (padded && (s.Cin > 1 || s.B > 1)) c.triggers.insert("pad_no_lower_check");
    if (padded) c.triggers.insert("pad_offset_missing");
    if (dilated) c.triggers.insert("dilation_ignored");
    if (s.groups > 1) c.triggers.insert("group_offset_missing");
    if (R % 32 != 0 && R <= 1024) c.triggers.insert("dropped_tail_k");
    cases.push_back(std::move(c));
  }
  return cases;
}

class OpsBConvModel : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(OpsBConvModel, ControlsPassBugsCaught) {
  const auto& [sd, dt] = GetParam();
  expect_verdicts(builtin(sd == 2 ? "conv2d" : "conv1d"), dt, conv_cases(sd, dt));
}

INSTANTIATE_TEST_SUITE_P(All, OpsBConvModel,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::ValuesIn(k_case_dtypes)),
                         [](const auto& param_info) {
                           return "conv" + std::to_string(std::get<0>(param_info.param)) + "d_" +
                                  std::string(dtype_name(std::get<1>(param_info.param)));
                         });

}  // namespace
}  // namespace gpuemu::test_b
