// The verdict's non-finite rules on hand-built tensors (docs/error-model.md, "Non-finite values"):
// an element whose condition term reaches a quarter of float32's range is indeterminate whichever
// side is non-finite, and an infinity against a finite value is judged as +-(max + one ulp) of the
// output dtype, the same way whether the infinity is the output's or the reference's.
#include "gpuemu/engine/verdict.hpp"

#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/rng.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace gpuemu {
namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();
const double k_flt_max = static_cast<double>(std::numeric_limits<float>::max());

struct OneElement {
  DType dtype = DType::float16;
  double out = 0.0, ref = 0.0, c_acc = 0.0;
  double envelope = 2.0;
  bool exact = false;
};

// One output of one element: the kernel's `out` against the fp64 reference `ref`.
Verdict judge_one(const OneElement& x) {
  OpSchema schema;
  schema.name = "handmade";
  RefContext ctx;
  ctx.case_dtype = x.dtype;
  RefOutput ref{"out", x.dtype, {1}, {x.ref}, {x.c_acc}, {0.0}, {}, x.exact};
  const std::vector<double> out = {x.out};
  return judge(schema, ctx, {ref}, {Tensor::from_values(x.dtype, {1}, out)}, x.envelope);
}

TEST(Verdict, InfStandInIsMaxPlusOneUlp) {
  EXPECT_EQ(inf_stand_in(DType::float16), 65536.0);
  EXPECT_EQ(inf_stand_in(DType::bfloat16), std::ldexp(1.0, 128));
  EXPECT_EQ(inf_stand_in(DType::float32), std::ldexp(1.0, 128));
  EXPECT_EQ(inf_stand_in(DType::float8_e5m2), 65536.0);
  EXPECT_TRUE(std::isnan(inf_stand_in(DType::float8_e4m3fn)));  // no infinity
  EXPECT_TRUE(std::isnan(inf_stand_in(DType::float64)));        // 2^1024 is not a double
  EXPECT_TRUE(std::isnan(inf_stand_in(DType::int32)));
}

TEST(Verdict, HugeConditionTermIsIndeterminateWhicheverSideIsNonFinite) {
  const double big = k_flt_max / 4;  // 4 * c_acc >= FLT_MAX
  for (const auto& [out, ref] :
       {std::pair{k_inf, 1.0}, std::pair{k_nan, 1.0}, std::pair{1.0, k_inf}, std::pair{1.0, k_nan},
        std::pair{k_nan, k_inf}, std::pair{-k_inf, k_inf}}) {
    const Verdict v = judge_one({DType::float32, out, ref, big});
    EXPECT_TRUE(v.passed) << out << " vs " << ref << ": " << v.message;
    EXPECT_EQ(v.outputs[0].indeterminate, 1) << out << " vs " << ref;
    EXPECT_EQ(v.outputs[0].nonfinite_mismatch, 0) << out << " vs " << ref;
  }
  // An infinite condition term (from an infinite input) is no overflow of finite terms: the
  // reference's propagation is enforced there.
  EXPECT_FALSE(judge_one({DType::float32, k_nan, k_inf, k_inf}).passed);
  // Just under the threshold the same elements are mismatches.
  const double below = std::nextafter(k_flt_max / 4, 0.0);
  for (const auto& [out, ref] : {std::pair{k_nan, 1.0}, std::pair{1.0, k_nan}}) {
    const Verdict v = judge_one({DType::float32, out, ref, below});
    EXPECT_FALSE(v.passed) << out << " vs " << ref;
    EXPECT_EQ(v.outputs[0].nonfinite_mismatch, 1);
    EXPECT_EQ(v.outputs[0].indeterminate, 0);
    // NaN where the reference is finite is counted apart (a finite output where it is NaN is not).
    EXPECT_EQ(v.outputs[0].nan_where_finite, std::isnan(out) ? 1 : 0) << out << " vs " << ref;
    EXPECT_EQ(v.to_json()["outputs"][0]["nan_where_finite"], std::isnan(out) ? 1 : 0);
  }
}

TEST(Verdict, InfiniteReferenceIsMaxPlusOneUlpAgainstAFiniteOutput) {
  // fp16: max 65504, one ulp there 32, stand-in 65536. err(max) = 32 / (2^-11 * 65536) = 1.
  for (double ref : {k_inf, 1.0e6}) {  // +Inf itself, or a finite value that rounds to +Inf
    Verdict v = judge_one({DType::float16, 65504.0, ref});
    EXPECT_TRUE(v.passed) << ref << ": " << v.message;
    EXPECT_NEAR(v.max_error, 1.0, 1e-5);  // (the denominator also holds tiny_out)
    EXPECT_EQ(v.outputs[0].nonfinite_mismatch, 0);
    // The opposite sign, or a value far below the max, is a non-finite mismatch.
    for (double out : {-65504.0, 1.0, 32768.0}) {
      v = judge_one({DType::float16, out, ref});
      EXPECT_FALSE(v.passed) << out;
      EXPECT_EQ(v.outputs[0].nonfinite_mismatch, 1) << out;
      EXPECT_NE(v.message.find("finite output"), std::string::npos) << v.message;
    }
  }
  // The next value down scores 2: within the floor envelope of 2, outside a tighter one.
  EXPECT_NEAR(judge_one({DType::float16, 65472.0, k_inf}).max_error, 2.0, 1e-5);
  EXPECT_FALSE(judge_one({DType::float16, 65472.0, k_inf, 0.0, 1.5}).passed);
  // -Inf: the same with the sign.
  EXPECT_TRUE(judge_one({DType::float16, -65504.0, -k_inf}).passed);
  EXPECT_FALSE(judge_one({DType::float16, 65504.0, -k_inf}).passed);
  // bf16 and fp32: the max of the dtype against +-Inf.
  const double bf16_max = dtype_info(DType::bfloat16).max_finite;
  EXPECT_TRUE(judge_one({DType::bfloat16, bf16_max, k_inf}).passed);
  EXPECT_TRUE(judge_one({DType::bfloat16, -bf16_max, -k_inf}).passed);
  const double fp32_max = dtype_info(DType::float32).max_finite;
  EXPECT_TRUE(judge_one({DType::float32, fp32_max, k_inf}).passed);
  EXPECT_FALSE(judge_one({DType::float32, fp32_max / 2, k_inf}).passed);
}

TEST(Verdict, InfiniteOutputIsJudgedTheSameWay) {
  // The symmetric case: an Inf output against a finite reference near the top of the range.
  Verdict v = judge_one({DType::float16, k_inf, 65500.0});  // rounds to 65504: err = 36 / 31.98
  EXPECT_TRUE(v.passed) << v.message;
  EXPECT_NEAR(v.max_error, 36.0 / (65500.0 / 2048.0), 1e-3);
  EXPECT_TRUE(judge_one({DType::float16, -k_inf, -65504.0}).passed);
  for (double ref : {60000.0, 1.0, -65504.0}) {
    v = judge_one({DType::float16, k_inf, ref});
    EXPECT_FALSE(v.passed) << ref;
    EXPECT_EQ(v.outputs[0].nonfinite_mismatch, 1);
    EXPECT_EQ(v.outputs[0].nan_where_finite, 0);  // Inf, not NaN
    EXPECT_NE(v.message.find("Inf output"), std::string::npos) << v.message;
  }
  // The condition term widens it as it widens any element: 2^-24 * c_acc in the denominator.
  // 65536 - 60000 = 5536 against 2^-11 * 60000 + 2^-24 * c_acc: 189 with c_acc = 0, under 2 at
  // 5e10.
  EXPECT_TRUE(judge_one({DType::float16, k_inf, 60000.0, 5.0e10}).passed);
  EXPECT_FALSE(judge_one({DType::float16, k_inf, 60000.0, 1.0e9}).passed);
}

TEST(Verdict, NonFiniteWithoutAStandIn) {
  // NaN against a finite value, opposite infinities, and e4m3fn (no infinity): mismatches.
  EXPECT_FALSE(judge_one({DType::float16, k_nan, 1.0}).passed);
  EXPECT_FALSE(judge_one({DType::float16, 1.0, k_nan}).passed);
  EXPECT_FALSE(judge_one({DType::float16, -k_inf, k_inf}).passed);
  EXPECT_FALSE(judge_one({DType::float16, k_nan, k_inf}).passed);
  EXPECT_TRUE(judge_one({DType::float16, k_inf, k_inf}).passed);
  EXPECT_TRUE(judge_one({DType::float16, k_nan, k_nan}).passed);
  EXPECT_FALSE(judge_one({DType::float8_e4m3fn, 448.0, k_inf}).passed);  // Inf rounds to NaN there
}


// One fp16 element with a given c_in and alternative non-finite results.
Verdict judge_with(double out, double ref, double c_in, std::uint8_t alt) {
  OpSchema schema;
  schema.name = "handmade";
  RefContext ctx;
  ctx.case_dtype = DType::float16;
  RefOutput r{"out", DType::float16, {1}, {ref}, {0.0}, {c_in}, {}};
  if (alt) r.alt_nonfinite = {alt};
  const std::vector<double> values = {out};
  return judge(schema, ctx, {r}, {Tensor::from_values(DType::float16, {1}, values)}, 2.0);
}

TEST(Verdict, AlternativeNonFiniteResultsPassOnlyThoseListed) {
  // batch_norm's direct form gives +Inf where PyTorch's fused form (the reference) gives NaN.
  Verdict v = judge_with(k_inf, k_nan, 0.0, k_alt_pos_inf);
  EXPECT_TRUE(v.passed) << v.message;
  EXPECT_EQ(v.outputs[0].alternative, 1);
  EXPECT_FALSE(judge_with(-k_inf, k_nan, 0.0, k_alt_pos_inf).passed);  // not listed
  EXPECT_FALSE(judge_with(1.0, k_nan, 0.0, k_alt_pos_inf).passed);     // finite: not an alternative
  EXPECT_FALSE(judge_with(k_inf, k_nan, 0.0, 0).passed);                // nothing listed
  // rope's Inf·sin φ with an unresolvable sign: any non-finite result.
  for (double out : {k_inf, -k_inf, k_nan})
    EXPECT_TRUE(judge_with(out, -k_inf, 0.0, k_alt_any_nonfinite).passed) << out;
}

TEST(Verdict, InputDtypeIntermediatePastItsRangeIsIndeterminate) {
  // linear's unfused bias: x·Wᵀ = 70000 overflows fp16 before + bias brings it to 1000.
  Verdict v = judge_with(k_inf, 1000.0, 70000.0, 0);
  EXPECT_TRUE(v.passed) << v.message;
  EXPECT_EQ(v.outputs[0].indeterminate, 1);
  // Below the dtype's max the product rounds finitely: an Inf there is a real overflow bug.
  EXPECT_FALSE(judge_with(k_inf, 1000.0, 60000.0, 0).passed);
}

// The floor near zero is the smallest normal only where a correct result can be flushed to zero
// (its reference below it, give or take its bound); elsewhere it is the subnormal spacing.
TEST(Verdict, FloorNearZeroIsTheSmallestNormalOnlyWhereFlushingCanHappen) {
  const DType h = DType::float16;  // smallest normal 2^-14 = 6.1e-5
  // 5 % off at 1e-3: 50 ulps, a failure (the old floor of 2^-14 everywhere made this 0.81)
  EXPECT_GT(normalised_error(1.05e-3, 1e-3, 0.0, 0.0, h, h), 50.0);
  // a subnormal reference flushed to zero: what FTZ hardware returns, well within the envelope
  EXPECT_LT(normalised_error(0.0, 3e-5, 0.0, 0.0, h, h), 0.6);
  // just past the smallest normal with a bound that reaches below it: flushing is possible
  EXPECT_LT(normalised_error(0.0, 7e-5, 0.0, 0.01, h, h), 2.0);
  // just past it with no such bound: a zero there is wrong
  EXPECT_GT(normalised_error(0.0, 7e-5, 0.0, 0.0, h, h), 100.0);
  // float32: the subnormal spacing keeps an exact zero against an exact zero at 0
  EXPECT_EQ(normalised_error(0.0, 0.0, 0.0, 0.0, DType::float32, DType::float32), 0.0);
}

// End to end: a float16 softmax 5 % too large on constant rows, where every output is 1/N (found
// by the load benchmark: it passed at N >= 1000), fails wherever 1/N is a normal float16 (from
// N = 16384 on, 1/N is at or below the smallest normal, where flushing to zero is allowed); the
// correct one passes.
// An exact op (RefOutput::exact: relu, amax, embedding) admits no rounding: one ulp off fails in
// every dtype, where the ordinary bound (half an ulp of the output, envelope 2) lets it pass. A
// subnormal result flushed to zero, and the other sign of zero, still pass.
TEST(Verdict, ExactOutputFailsOneUlpButAdmitsFlushToZeroAndSignedZero) {
  for (DType d : {DType::float32, DType::float16, DType::bfloat16}) {
    const auto& info = dtype_info(d);
    const double one_up = 1.0 + 2.0 * info.unit_roundoff;  // the next value above 1
    EXPECT_TRUE(judge_one({d, one_up, 1.0, 0.0, 2.0, false}).passed) << dtype_name(d);
    const Verdict v = judge_one({d, one_up, 1.0, 0.0, 2.0, true});
    EXPECT_FALSE(v.passed) << dtype_name(d);
    EXPECT_NE(v.message.find("differ from the exact result"), std::string::npos) << v.message;
    EXPECT_TRUE(judge_one({d, 1.0, 1.0, 0.0, 2.0, true}).passed) << dtype_name(d);
    EXPECT_TRUE(judge_one({d, 0.0, -0.0, 0.0, 2.0, true}).passed) << dtype_name(d);
    const double sub = info.min_subnormal * 3.0;
    EXPECT_TRUE(judge_one({d, 0.0, sub, 0.0, 2.0, true}).passed) << dtype_name(d);  // FTZ
    EXPECT_FALSE(judge_one({d, 0.0, info.min_normal * 2.0, 0.0, 2.0, true}).passed) << dtype_name(d);
    // The condition terms are not read: a huge c_acc excuses nothing.
    EXPECT_FALSE(judge_one({d, one_up, 1.0, 1e30, 2.0, true}).passed) << dtype_name(d);
  }
}

TEST(Verdict, Float16SoftmaxFivePercentOffFailsOnLongConstantRows) {
  auto engine = Engine::create_default();
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  const OpSchema* schema = engine->catalogue().find("softmax");
  ASSERT_NE(schema, nullptr);
  for (const std::int64_t n : {64, 1000, 4096, 8192}) {
    TestCase c;
    c.op = "softmax";
    c.inputs.emplace("x", Tensor::from_values(DType::float16, {2, n},
                                              std::vector<double>(static_cast<std::size_t>(2 * n), 3.0)));
    auto rc = make_ref_context(*schema, c.inputs, Json{{"dim", -1}}, DType::float16);
    ASSERT_TRUE(rc.ok()) << rc.error().message;
    c.dims = rc->dims;
    c.attrs = rc->attrs;
    c.dtype = rc->case_dtype;
    for (const double scale : {1.0, 1.05}) {
      const std::vector<double> out(static_cast<std::size_t>(2 * n), scale / static_cast<double>(n));
      auto v = engine->judge_case(c, {Tensor::from_values(DType::float16, {2, n}, out)});
      ASSERT_TRUE(v.ok()) << v.error().message;
      EXPECT_EQ(v->passed, scale == 1.0) << "N " << n << " scale " << scale << ": " << v->message;
    }
  }
}

}  // namespace
}  // namespace gpuemu

namespace gpuemu {
namespace {

// The verdict's vector pass gives every finite element the error normalised_error gives it, bit for
// bit, whatever the dtypes and terms (c_acc and c_in present or not, exact ops, values near the
// floors, zeros of either sign); the count over the envelope and the worst element follow from it.
TEST(Verdict, ErrorsOfWholeBuffersAreNormalisedErrorBitForBit) {
  Rng rng(20261203);
  OpSchema schema;
  schema.name = "handmade";
  for (DType od : {DType::float32, DType::float16, DType::bfloat16})
    for (DType in : {DType::float32, DType::bfloat16})
      for (int terms = 0; terms < 4; ++terms)
        for (bool exact : {false, true}) {
          const std::size_t n = 1 + static_cast<std::size_t>(rng.bounded(300));
          RefVec value(n), c_acc, c_in;
          std::vector<double> out(n);
          if (terms & 1) c_acc.resize(n);
          if (terms & 2) c_in.resize(n);
          for (std::size_t e = 0; e < n; ++e) {
            const double scale = std::ldexp(1.0, static_cast<int>(rng.integer(-30, 10)));
            value[e] = e % 7 == 3 ? (e % 2 ? 0.0 : -0.0) : rng.normal() * scale;
            out[e] = round_to(od, value[e] * (1.0 + (rng.chance(1, 4) ? rng.normal() * 1e-3 : 0.0)));
            if (!c_acc.empty()) c_acc[e] = std::fabs(rng.normal()) * scale;
            if (!c_in.empty()) c_in[e] = std::fabs(rng.normal()) * scale;
          }
          RefContext ctx;
          ctx.case_dtype = in;
          RefOutput ref{"out", od, {static_cast<std::int64_t>(n)}, value, c_acc, c_in, {}, exact};
          const Tensor got = Tensor::from_values(od, {static_cast<std::int64_t>(n)}, out);
          const Verdict v = judge(schema, ctx, {ref}, {got}, 2.0);
          ASSERT_EQ(v.outputs.size(), 1u);
          const auto decoded = got.to_f64();
          std::int64_t over = 0;
          for (std::size_t e = 0; e < n; ++e) {
            const double want = normalised_error(decoded[e], value[e], c_acc.empty() ? 0.0 : c_acc[e],
                                                 c_in.empty() ? 0.0 : c_in[e], od, in, exact);
            ASSERT_EQ(std::bit_cast<std::uint64_t>(v.outputs[0].errors[e]), std::bit_cast<std::uint64_t>(want))
                << dtype_name(od) << " " << dtype_name(in) << " terms " << terms << " exact " << exact << " at " << e;
            over += want > 2.0;
          }
          EXPECT_EQ(v.outputs[0].failing, over);
        }
}

}  // namespace
}  // namespace gpuemu
