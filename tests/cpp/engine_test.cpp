// The fuzzer, the verdict, calibration, the minimizer and the diagnosis, end to end on the
// built-in softmax kernels (a correct online softmax, a tail-mask leak, an online softmax without
// the rescale, no max subtraction).
#include "gpuemu/engine.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace gpuemu {
namespace {

Engine& engine() { return testing_support::source_engine(); }

const OpSchema& softmax() { return *engine().catalogue().find("softmax"); }

TEST(Cases, SameSeedSameBytesOtherSeedOtherBytes) {
  CaseGenerator gen(softmax(), FuzzOptions{});
  for (std::int64_t i = 0; i < 10; ++i) {
    auto a = gen.generate(42, i), b = gen.generate(42, i), c = gen.generate(43, i);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(a->describe().dump(), b->describe().dump());
    EXPECT_NE(a->describe().dump(), c->describe().dump());
    // A case is the same whether generated as index i of a run or from its seed.
    auto d = gen.generate_from_seed(a->seed);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(tensor_digest(a->inputs.at("x")), tensor_digest(d->inputs.at("x")));
  }
}

TEST(Cases, RespectRestrictionsAndBudget) {
  FuzzOptions o;
  o.dims["N"] = {129, 257};
  o.dtypes = {DType::bfloat16};
  CaseGenerator gen(softmax(), o);
  ASSERT_TRUE(gen.validate().ok());
  bool saw_non_contiguous = false;
  for (std::int64_t i = 0; i < 50; ++i) {
    auto c = gen.generate(7, i);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_TRUE(c->dims.at("N") == 129 || c->dims.at("N") == 257);
    EXPECT_EQ(c->dtype, DType::bfloat16);
    EXPECT_LE(c->inputs.at("x").numel(), softmax().max_elements);
    saw_non_contiguous |= !c->inputs.at("x").is_contiguous() || c->inputs.at("x").offset() != 0;
    // Values are exactly representable in the case dtype.
    for (double v : c->inputs.at("x").to_f64()) ASSERT_EQ(v, round_to(DType::bfloat16, v));
  }
  EXPECT_TRUE(saw_non_contiguous);
}

TEST(Cases, BadOptionsAreClearErrors) {
  FuzzOptions o;
  o.dims["Q"] = {1};
  auto st = CaseGenerator(softmax(), o).validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("has no dim 'Q'"), std::string::npos);
  FuzzOptions o2;
  o2.attrs = {{"dim", "x"}};
  EXPECT_FALSE(CaseGenerator(softmax(), o2).validate().ok());
  FuzzOptions o3;
  o3.dtypes = {DType::int8};
  EXPECT_FALSE(CaseGenerator(softmax(), o3).validate().ok());
}

// Pinned dims far past the schema's range are refused by the element budget, however their
// product wraps: 2^62 x 512 is 2^71, which int64 arithmetic made 0.
TEST(Cases, HugePinnedDimsAreRefusedNotWrapped) {
  for (const std::int64_t r : {std::int64_t{512}, std::int64_t{3}, std::int64_t{1}}) {
    FuzzOptions o;
    o.dims["N"] = {std::int64_t{1} << 62};
    o.dims["R"] = {r};
    CaseGenerator gen(softmax(), o);
    ASSERT_TRUE(gen.validate().ok());
    auto c = gen.generate(7, 0);
    ASSERT_FALSE(c.ok()) << "R " << r << ": a case of " << c->inputs.at("x").numel() << " elements";
    EXPECT_NE(c.error().message.find("budget"), std::string::npos) << c.error().message;
  }
}

TEST(Cases, RestrictionsAreCheckedAgainstTheSchema) {
  const OpSchema& ln = *engine().catalogue().find("layer_norm");
  auto error_of = [&](const OpSchema& s, FuzzOptions o) {
    auto st = CaseGenerator(s, std::move(o)).validate();
    EXPECT_FALSE(st.ok());
    return st.ok() ? std::string() : st.error().message;
  };
  FuzzOptions below_min;
  below_min.dims["N"] = {0};
  EXPECT_NE(error_of(softmax(), below_min).find("must be >= 1, got 0"), std::string::npos);
  FuzzOptions unknown_input;
  unknown_input.present["gamma"] = true;
  EXPECT_NE(error_of(ln, unknown_input).find("has no input 'gamma'"), std::string::npos);
  FuzzOptions required_absent;
  required_absent.present["x"] = false;
  EXPECT_NE(error_of(ln, required_absent).find("is required"), std::string::npos);
  FuzzOptions bad_policy;
  bad_policy.precision["matmul"] = "fp4";
  EXPECT_NE(error_of(ln, bad_policy).find("unknown policy 'fp4'"), std::string::npos);
  FuzzOptions not_gemm;
  not_gemm.precision["layer_norm"] = "tf32";
  EXPECT_NE(error_of(ln, not_gemm).find("no GEMM operands"), std::string::npos);
  // Past a dim's max is a pinned size, not an error (a vocabulary-sized row).
  FuzzOptions past_max;
  past_max.dims["N"] = {20000};
  past_max.dims["R"] = {1};
  EXPECT_TRUE(CaseGenerator(softmax(), past_max).validate().ok());
}

TEST(Cases, PinnedOptionalInputsAndNothingElseChanges) {
  const OpSchema& ln = *engine().catalogue().find("layer_norm");
  FuzzOptions both, none;
  both.present = {{"weight", true}, {"bias", true}};
  none.present = {{"weight", false}, {"bias", false}};
  CaseGenerator pinned(ln, both), absent(ln, none), free(ln, FuzzOptions{});
  int free_absent = 0;
  for (std::int64_t i = 0; i < 40; ++i) {
    auto a = pinned.generate(5, i), b = absent.generate(5, i), c = free.generate(5, i);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(a->inputs.size(), 3u);
    EXPECT_EQ(b->inputs.size(), 1u);
    free_absent += c->inputs.size() < 3;
    EXPECT_EQ(tensor_digest(a->inputs.at("x")), tensor_digest(c->inputs.at("x")));
    EXPECT_EQ(a->dims, c->dims);
    if (c->inputs.count("weight")) {
      EXPECT_EQ(tensor_digest(a->inputs.at("weight")), tensor_digest(c->inputs.at("weight")));
    }
  }
  EXPECT_GT(free_absent, 5);
}

TEST(Precision, PoliciesResolvePerOpThenFamilyAndOnlyWidenWideOperands) {
  const OpSchema& mm = *engine().catalogue().find("matmul");
  const OpSchema& attn = *engine().catalogue().find("flash_attention");
  EXPECT_EQ(resolve_precision({}, mm).value(), PrecisionPolicy::ieee);
  EXPECT_EQ(resolve_precision({{"gemm", "tf32"}}, mm).value(), PrecisionPolicy::tf32);
  EXPECT_EQ(resolve_precision({{"gemm", "tf32"}, {"matmul", "bf16x3"}}, mm).value(), PrecisionPolicy::bf16x3);
  EXPECT_EQ(resolve_precision({{"gemm", "tf32"}}, attn).value(), PrecisionPolicy::ieee);
  EXPECT_EQ(resolve_precision({{"attention", "tf32x3"}}, attn).value(), PrecisionPolicy::tf32x3);
  EXPECT_EQ(policy_operand_roundoff(PrecisionPolicy::tf32, DType::float32), 0x1.0p-10);
  EXPECT_EQ(policy_operand_roundoff(PrecisionPolicy::tf32, DType::float16), 0.0);  // exact in TF32
  EXPECT_EQ(policy_operand_roundoff(PrecisionPolicy::tf32, DType::bfloat16), 0.0);
  EXPECT_EQ(policy_operand_roundoff(PrecisionPolicy::ieee, DType::float32), 0.0);
  // The case carries its policy, and the reference context the operand roundoff.
  FuzzOptions o;
  o.precision["matmul"] = "tf32";
  o.dtypes = {DType::float32};
  auto c = CaseGenerator(mm, o).generate(1, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->precision, PrecisionPolicy::tf32);
  EXPECT_EQ(c->describe()["precision"], "tf32");
  EXPECT_EQ(case_ref_context(mm, *c).value().operand_roundoff, 0x1.0p-10);
}

// An fp32 operand of 3.40199e38 or more rounds to Inf in TF32: cuBLAS's TF32 GEMM on an H200 gave
// NaN over row 0 of a 95x7 @ 7x61 product whose row 0 held +-3.4025e38 (docs/gpu.md). Under a
// declared tf32 policy the outputs such an operand takes part in may be non-finite; every other
// output is judged as before, and without the policy the same NaN fails.
// A small regular float32 case of a gemm or conv op under a declared precision policy (or ieee).
TestCase policy_case(const OpSchema& schema, const std::string& op, const char* policy) {
  FuzzOptions o;
  o.precision[op] = policy;
  o.dtypes = {DType::float32};
  o.layouts = false;
  o.distribution = Distribution::regular;
  if (op == "matmul") o.dims = {{"M", {6}}, {"K", {7}}, {"N", {5}}};
  return CaseGenerator(schema, o).generate(3, 0).value();
}

TEST(Precision, ASubnormalOperandThatTf32LosesIsWithinThePolicysFloor) {
  EXPECT_EQ(policy_operand_floor(PrecisionPolicy::tf32, DType::float32), 0x1.0p-136);
  EXPECT_EQ(policy_operand_floor(PrecisionPolicy::tf32x3, DType::float32), 0x1.0p-136);
  EXPECT_EQ(policy_operand_floor(PrecisionPolicy::bf16x3, DType::float32), 0x1.0p-133);
  EXPECT_EQ(policy_operand_floor(PrecisionPolicy::ieee, DType::float32), 0.0);
  EXPECT_EQ(policy_operand_floor(PrecisionPolicy::tf32, DType::bfloat16), 0.0);  // exact in TF32
  // The H200's TF32 cuBLAS and cuDNN lost products 2^-149 * 2^127 = 2^-22 (docs/gpu.md, seed 3):
  // the kernel's answer is the reference with the subnormal operand rounded to TF32's 0.
  for (const char* op : {"matmul", "linear", "conv1d"}) {
    const OpSchema& schema = *engine().catalogue().find(op);
    const std::string x_name = std::string(op) == "matmul" ? "a" : "x";
    for (const char* policy : {"tf32", "ieee"}) {
      auto c = policy_case(schema, op, policy);
      for (auto& [name, t] : c.inputs) t = t.contiguous();  // storages of their own
      Tensor& x = c.inputs.at(x_name);
      Tensor& w = c.inputs.at(std::string(op) == "matmul" ? "b" : "weight");
      // The reduction's first entry of every dot product (a[:, 0], x[..., 0], x[:, 0, :]) subnormal,
      // the weights it meets 2^127, the rest of w tiny: each product of that operand is 2^-22, far
      // above what the others contribute.
      const std::int64_t inner = x.shape().back();
      const std::int64_t chan = std::string(op) == "conv1d" ? x.shape()[1] : 1;
      auto first_entry = [&](std::int64_t i) {
        return std::string(op) == "conv1d" ? (i / inner) % chan == 0 : i % inner == 0;
      };
      for (std::int64_t i = 0; i < x.numel(); ++i)
        if (first_entry(i)) x.set_flat(i, 0x1.0p-149);
      for (std::int64_t k = 0; k < w.numel(); ++k) w.set_flat(k, w.get_flat(k) * 0x1.0p-30);
      if (std::string(op) == "matmul")
        for (std::int64_t j = 0; j < 5; ++j) w.set_flat(j, 0x1.0p127);  // b[0, :]
      else if (std::string(op) == "linear")
        for (std::int64_t r = 0; r < w.shape()[0]; ++r) w.set_flat(r * w.shape()[1], 0x1.0p127);  // w[:, 0]
      else
        for (std::int64_t co = 0; co < w.shape()[0]; ++co)
          for (std::int64_t kk = 0; kk < w.shape()[2]; ++kk)
            w.set_flat(co * w.shape()[1] * w.shape()[2] + kk, 0x1.0p127);  // w[:, 0, :]
      const RefContext ctx = case_ref_context(schema, c).value();
      const auto ref = run_reference(schema, ctx).value();
      TestCase flushed = c;
      flushed.inputs.at(x_name) = x.contiguous();
      for (std::int64_t i = 0; i < x.numel(); ++i)
        if (first_entry(i)) flushed.inputs.at(x_name).set_flat(i, 0.0);
      const auto lost = run_reference(schema, case_ref_context(schema, flushed).value()).value();
      ASSERT_NE(lost[0].value, ref[0].value) << op;  // the flush moves some outputs
      const auto v = judge(schema, ctx, ref, {Tensor::from_values(ref[0].dtype, ref[0].shape, lost[0].value)}, 2.0);
      const bool tf32 = std::string(policy) == "tf32";
      EXPECT_EQ(v.passed, tf32) << op << " " << policy << ": " << v.message;
      if (tf32) {  // the floor excuses that loss and no more: each lost operand's own product
        // (2^-22 each, a few per output), not 2^-12 more, nor the 2^-9 that eta = 2^-136 times
        // 2^127 would allow if every operand could lose eta
        auto wrong = lost[0].value;
        for (auto& y : wrong) y += 0x1.0p-12;
        EXPECT_FALSE(judge(schema, ctx, ref, {Tensor::from_values(ref[0].dtype, ref[0].shape, wrong)}, 2.0).passed) << op;
      }
    }
  }
}

TEST(Precision, AnOperandThatOverflowsTf32MayMakeItsOutputsNonFinite) {
  EXPECT_EQ(policy_operand_overflow(PrecisionPolicy::tf32, DType::float32), 0x1.ffep127);
  EXPECT_EQ(policy_operand_overflow(PrecisionPolicy::tf32x3, DType::float32), 0x1.ffep127);
  EXPECT_EQ(policy_operand_overflow(PrecisionPolicy::bf16x3, DType::float32), 0x1.ffp127);
  EXPECT_TRUE(std::isinf(policy_operand_overflow(PrecisionPolicy::ieee, DType::float32)));
  EXPECT_TRUE(std::isinf(policy_operand_overflow(PrecisionPolicy::tf32, DType::bfloat16)));  // fits
  EXPECT_TRUE(std::isinf(policy_operand_overflow(PrecisionPolicy::tf32, DType::float16)));
  for (const char* op : {"matmul", "conv1d"}) {
    const OpSchema& schema = *engine().catalogue().find(op);
    for (const char* policy : {"tf32", "ieee"}) {
      auto c = policy_case(schema, op, policy);
      Tensor& a = c.inputs.at(std::string(op) == "matmul" ? "a" : "x");
      a.set_flat(1, 0x1.fffp127);  // 3.4024e38: a finite fp32, Inf in TF32
      // Its partners tiny, so the exact products stay far inside fp32's range (the boundary
      // values that failed on the H200 paired such operands with small ones): no overflow of the
      // accumulation excuses a non-finite output here, only the policy's operand rounding does.
      if (std::string(op) == "matmul") {
        Tensor& b = c.inputs.at("b");
        for (std::int64_t j = 0; j < 5; ++j) b.set_flat(5 + j, b.get_flat(5 + j) * 1e-30);  // b[1, :]
      } else {
        Tensor& w = c.inputs.at("weight");
        for (std::int64_t k = 0; k < w.numel(); ++k) w.set_flat(k, w.get_flat(k) * 1e-30);
      }
      const RefContext ctx = case_ref_context(schema, c).value();
      const auto ref = run_reference(schema, ctx).value();
      const std::vector<std::uint8_t>& alt = ref[0].alt_nonfinite;
      const bool tf32 = std::string(policy) == "tf32";
      if (!tf32) {
        EXPECT_TRUE(alt.empty()) << op;
      } else {
        ASSERT_FALSE(alt.empty()) << op;
        const auto flagged = std::count(alt.begin(), alt.end(), k_alt_any_nonfinite);
        EXPECT_GT(flagged, 0) << op;
        EXPECT_LT(flagged, static_cast<std::ptrdiff_t>(alt.size())) << op;  // the rest are not
        if (std::string(op) == "matmul") {  // a[0, 1]: row 0 of the output, and only it
          for (std::size_t i = 0; i < alt.size(); ++i) EXPECT_EQ(alt[i] != 0, i < 5) << i;
        }
      }
      // The kernel's answer: the reference rounded to fp32, NaN wherever the policy allows it.
      auto vals = ref[0].value;
      for (std::size_t i = 0; i < alt.size(); ++i)
        if (alt[i] != 0) vals[i] = std::numeric_limits<double>::quiet_NaN();
      if (!tf32) vals[0] = std::numeric_limits<double>::quiet_NaN();  // the same NaN, no policy
      const auto v = judge(schema, ctx, ref, {Tensor::from_values(ref[0].dtype, ref[0].shape, vals)}, 2.0);
      EXPECT_EQ(v.passed, tf32) << op << " " << policy << ": " << v.message;
      if (tf32) {  // a NaN outside the flagged outputs still fails
        std::size_t other = 0;
        while (other < alt.size() && alt[other] != 0) ++other;
        ASSERT_LT(other, alt.size());
        vals[other] = std::numeric_limits<double>::quiet_NaN();
        EXPECT_FALSE(judge(schema, ctx, ref, {Tensor::from_values(ref[0].dtype, ref[0].shape, vals)}, 2.0).passed)
            << op;
      }
    }
  }
}

TEST(Cases, ShapesHitTileBoundariesAndLongReductions) {
  CaseGenerator gen(softmax(), FuzzOptions{});
  int past_block = 0, long_rows = 0;
  for (std::int64_t i = 0; i < 200; ++i) {
    auto c = gen.generate(11, i);
    ASSERT_TRUE(c.ok());
    const auto n = c->dims.at("N");
    past_block += (n % 16 != 0 && n > 16);
    long_rows += n >= 1000;
  }
  EXPECT_GT(past_block, 60);
  EXPECT_GT(long_rows, 20);
}

TEST(Verdict, MismatchesHaveTheirOwnMessages) {
  CaseGenerator gen(softmax(), FuzzOptions{});
  auto c = gen.generate(1, 0).value();
  auto ctx = make_ref_context(softmax(), c.inputs, c.attrs, c.dtype).value();
  auto ref = run_reference(softmax(), ctx).value();
  Tensor wrong_shape = Tensor::zeros(ref[0].dtype, {1});
  auto v = judge(softmax(), ctx, ref, {wrong_shape}, 4.0);
  EXPECT_FALSE(v.passed);
  EXPECT_NE(v.message.find("shape mismatch"), std::string::npos);
  Tensor wrong_dtype = Tensor::zeros(DType::float64, ref[0].shape);
  v = judge(softmax(), ctx, ref, {wrong_dtype}, 4.0);
  EXPECT_NE(v.message.find("dtype mismatch"), std::string::npos);
  auto vals = ref[0].value;
  vals[0] = std::numeric_limits<double>::quiet_NaN();
  v = judge(softmax(), ctx, ref, {Tensor::from_values(ref[0].dtype, ref[0].shape, vals)}, 4.0);
  EXPECT_FALSE(v.passed);
  EXPECT_NE(v.message.find("NaN output"), std::string::npos);
  EXPECT_EQ(v.outputs[0].worst_index, 0);
  // The exact reference rounded to the output dtype passes.
  v = judge(softmax(), ctx, ref, {Tensor::from_values(ref[0].dtype, ref[0].shape, ref[0].value)}, 2.0);
  EXPECT_TRUE(v.passed) << v.message;
}

TEST(Verdict, CaseJudgeJudgesAsJudgeCase) {
  // One reference (its rounding computed once) for many candidates gives each the verdict
  // judge_case gives it: here in bfloat16, where the reference is rounded per element.
  FuzzOptions o;
  o.dtypes = {DType::bfloat16};
  o.dims["N"] = {300};
  auto c = CaseGenerator(softmax(), o).generate(3, 0).value();
  auto ctx = make_ref_context(softmax(), c.inputs, c.attrs, c.dtype).value();
  auto ref = run_reference(softmax(), ctx).value();
  std::vector<std::vector<Tensor>> candidates;
  for (double scale : {1.0, 1.0 + 0x1.0p-9, 1.0 + 0x1.0p-6}) {
    auto vals = ref[0].value;
    for (auto& v : vals) v *= scale;
    candidates.push_back({Tensor::from_values(ref[0].dtype, ref[0].shape, vals)});
  }
  candidates.push_back({Tensor::zeros(ref[0].dtype, {1})});  // a shape mismatch
  auto j = engine().case_judge(c);
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ(j->envelope(), engine().envelopes().get("softmax", DType::bfloat16));
  std::vector<Verdict> many;
  for (const auto& cand : candidates) {
    many.push_back(j->judge(cand));
    auto one = engine().judge_case(c, cand).value();
    EXPECT_EQ(many.back().passed, one.passed);
    EXPECT_EQ(many.back().max_error, one.max_error);
    EXPECT_EQ(many.back().message, one.message);
  }
  EXPECT_TRUE(many[0].passed);
  EXPECT_FALSE(many[2].passed);
  EXPECT_FALSE(many[3].passed);
}

TEST(Verdict, SpecialValuesJudgedByPropagation) {
  // A correct kernel fed NaN/Inf passes; "any NaN fails" would flag it.
  FuzzRequest req;
  req.op = "softmax";
  req.options.distribution = Distribution::special;
  req.seed = 5;
  req.iterations = 20;
  auto k = engine().builtin_kernel("softmax", "fp32_two_pass").value();
  auto r = engine().fuzz(req, k);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->passed, r->total) << (r->failures.empty() ? "" : r->failures[0].verdict.message);
}

TEST(Fuzz, CorrectKernelsPassBuggyKernelsAreCaught) {
  for (const char* control : {"fp32_two_pass", "fp32_online"}) {
    for (auto dist : {Distribution::regular, Distribution::adversarial, Distribution::boundary}) {
      FuzzRequest req;
      req.op = "softmax";
      req.seed = 1001;
      req.iterations = 20;
      req.options.distribution = dist;
      auto r = engine().fuzz(req, engine().builtin_kernel("softmax", control).value());
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->passed, r->total) << control << " " << distribution_name(dist) << ": "
                                     << (r->failures.empty() ? "" : r->failures[0].verdict.message);
    }
  }
  for (const char* bug : {"tail_leak", "no_max_subtraction", "online_no_rescale"}) {
    FuzzRequest req;
    req.op = "softmax";
    req.seed = 2002;
    req.iterations = 30;
    req.diagnose = false;
    auto r = engine().fuzz(req, engine().builtin_kernel("softmax", bug).value());
    ASSERT_TRUE(r.ok());
    EXPECT_LT(r->passed, r->total) << bug;
    EXPECT_GE(r->first_failure, 0);
    EXPECT_LE(r->first_failure, 5) << bug;
  }
}

TEST(Minimize, TailMaskLandsOnePastTheBlock) {
  FuzzRequest req;
  req.op = "softmax";
  req.seed = 77;
  req.iterations = 10;
  req.fail_fast = true;
  req.diagnose = false;
  auto k = engine().builtin_kernel("softmax", "tail_leak").value();
  auto r = engine().fuzz(req, k).value();
  ASSERT_FALSE(r.failures.empty());
  auto m = engine().minimize("softmax", req.options, r.failures[0].test_case, k);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_NE(m->summary.find("fails at N=129, passes at N=128"), std::string::npos) << m->summary;
  EXPECT_EQ(m->test_case.dims.at("R"), 1);
}

TEST(Diagnose, NamesTheBugClass) {
  struct Want {
    const char* kernel;
    const char* bug_class;
  };
  for (const Want& w : {Want{"tail_leak", "tail_mask"}, Want{"online_no_rescale", "online_rescale"},
                        Want{"no_max_subtraction", "overflow"}}) {
    FuzzRequest req;
    req.op = "softmax";
    req.seed = 31;
    req.iterations = 40;
    req.fail_fast = true;
    auto k = engine().builtin_kernel("softmax", w.kernel).value();
    auto r = engine().fuzz(req, k).value();
    ASSERT_FALSE(r.failures.empty()) << w.kernel;
    EXPECT_EQ(r.failures[0].diagnosis.bug_class, w.bug_class)
        << w.kernel << ": " << r.failures[0].diagnosis.summary;
    EXPECT_NE(r.failures[0].repro.find("--seed 31 --case"), std::string::npos);
  }
}

TEST(Calibrate, EnvelopeIsFlooredAndFromControls) {
  auto c = engine().calibrate("softmax", DType::bfloat16, 24, 9);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_GE(c->envelope, EnvelopeTable::k_floor);
  EXPECT_GE(c->envelope, 1.5 * c->p95 - 1e-12);
  EXPECT_EQ(c->controls.size(), 2u);
  // Calibration seeds never collide with a fuzz run's case seeds.
  EXPECT_NE(calibration_case_seed(9, DType::bfloat16, 0), case_seed(9, 0));
}


// gpuemu.reference asks for the value alone (RefContext::value_only): every op's value must be the
// one a verdict judges against, bit for bit, on every strategy (special values included), with
// layouts and attrs varied; the ops that skip their bounds leave c_acc and c_in empty.
TEST(Reference, ValueOnlyGivesTheVerdictsValueBitForBit) {
  int skipped_bounds = 0;
  for (const OpSchema* s : engine().catalogue().all()) {
    if (s->reference.rfind("builtin:", 0) != 0) continue;
    for (auto dist : {Distribution::adversarial, Distribution::special}) {
      FuzzOptions o;
      o.distribution = dist;
      o.element_budget_scale = 0.05;
      for (const auto& attr : s->attrs)
        if (!attr.values.empty()) o.vary_attrs.push_back(attr.name);
      CaseGenerator gen(*s, o);
      for (std::int64_t i = 0; i < 3; ++i) {
        auto c = gen.generate(77, i);
        ASSERT_TRUE(c.ok()) << s->name << ": " << c.error().message;
        auto ctx = make_ref_context(*s, c->inputs, c->attrs, c->dtype).value();
        auto full = run_reference(*s, ctx);
        ASSERT_TRUE(full.ok()) << s->name << ": " << full.error().message;
        ctx.value_only = true;
        auto alone = run_reference(*s, ctx);
        ASSERT_TRUE(alone.ok()) << s->name << ": " << alone.error().message;
        ASSERT_EQ(full->size(), alone->size()) << s->name;
        for (std::size_t k = 0; k < full->size(); ++k) {
          const auto &f = (*full)[k], &a = (*alone)[k];
          EXPECT_EQ(f.shape, a.shape) << s->name;
          ASSERT_EQ(f.value.size(), a.value.size()) << s->name;
          EXPECT_EQ(0, std::memcmp(f.value.data(), a.value.data(), f.value.size() * sizeof(double)))
              << s->name << " case " << i << " (" << distribution_name(dist) << "): output " << f.name;
          skipped_bounds += a.c_acc.empty() && !f.c_acc.empty();
        }
      }
    }
  }
  EXPECT_GT(skipped_bounds, 0) << "no reference skipped its bounds";
}

// An embedding's output is B·L·D, far more than its inputs (indices B·L, a V×D table) can say: the
// schema's work budget bounds it (an uncapped case once asked for 537M output elements, 4 GiB in
// fp64, and took the power harness down), while still drawing outputs past the input budget.
// Cancelling dot products (values.cpp, draw_jointly; issue 21): every adversarial matmul case with
// K >= 2 holds an output whose exact value is at least 2^7 times smaller than sum |a*b| (or is 0
// while that sum is not), every value stays on the dtype's grid, and the joint pass regenerates
// bit for bit from the case's seed. A case the minimizer has simplified is left as drawn.
TEST(Cases, GemmCasesHoldCancellingDotProductsOnTheDtypeGrid) {
  const OpSchema& mm = *engine().catalogue().find("matmul");
  for (DType d : {DType::bfloat16, DType::float16}) {
    FuzzOptions o;
    o.dtypes = {d};
    CaseGenerator gen(mm, o);
    int checked = 0;
    for (std::int64_t i = 0; i < 25; ++i) {
      auto c = gen.generate(7, i);
      ASSERT_TRUE(c.ok()) << c.error().message;
      const Tensor& a = c->inputs.at("a");
      const Tensor& b = c->inputs.at("b");
      for (const Tensor* t : {&a, &b})
        for (std::int64_t k = 0; k < t->numel(); ++k) {
          const double v = t->get_flat(k);
          ASSERT_TRUE(std::isfinite(v));
          ASSERT_EQ(round_to(d, v), v);
        }
      const std::int64_t M = a.size(0), K = a.size(1), N = b.size(1);
      const bool b_repeats_along_k = c->layouts.at("b").kind == "expanded" && c->layouts.at("b").param == 0;
      const bool a_repeats_along_k = c->layouts.at("a").kind == "expanded" && c->layouts.at("a").param == 1;
      if (K < 2 || (b_repeats_along_k && a_repeats_along_k)) continue;
      std::vector<double> av = a.to_f64(), bv = b.to_f64();
      bool cancelling = false;
      for (std::int64_t r = 0; r < M && !cancelling; ++r)
        for (std::int64_t j = 0; j < N && !cancelling; ++j) {
          double s = 0.0, t = 0.0;  // K <= a few thousand products of ~8-bit values: exact enough
          for (std::int64_t k = 0; k < K; ++k) {
            const double p = av[static_cast<std::size_t>(r * K + k)] * bv[static_cast<std::size_t>(k * N + j)];
            s += p;
            t += std::fabs(p);
          }
          cancelling = t > 0 && (s == 0.0 || t >= 128.0 * std::fabs(s));
        }
      EXPECT_TRUE(cancelling) << c->describe().dump();
      ++checked;
      auto again = gen.generate_from_seed(c->seed);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(tensor_digest(b), tensor_digest(again->inputs.at("b")));
      EXPECT_EQ(tensor_digest(a), tensor_digest(again->inputs.at("a")));
      // The minimizer's simplified case: a's values replaced, b as drawn (nothing cancels a).
      auto simple = gen.generate_pinned(c->seed, {}, {{"a", "ones"}});
      ASSERT_TRUE(simple.ok());
      if (c->layouts.at("b").kind != "expanded") {
        EXPECT_NE(tensor_digest(b), tensor_digest(simple->inputs.at("b"))) << c->describe().dump();
      }
    }
    EXPECT_GE(checked, 15);
  }
}

TEST(Cases, EmbeddingOutputsStayWithinTheWorkBudget) {
  const OpSchema& s = *engine().catalogue().find("embedding");
  ASSERT_EQ(s.work, "B*L*D");
  CaseGenerator gen(s, FuzzOptions{});
  std::int64_t largest = 0;
  for (std::int64_t i = 0; i < 300; ++i) {
    auto c = gen.generate(5, i);
    ASSERT_TRUE(c.ok()) << c.error().message;
    const std::int64_t out = c->dims.at("B") * c->dims.at("L") * c->dims.at("D");
    EXPECT_LE(out, s.max_work) << c->describe().dump();
    largest = std::max(largest, out);
  }
  EXPECT_GT(largest, s.max_elements);
}

}  // namespace
}  // namespace gpuemu
