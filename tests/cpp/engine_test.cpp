// The fuzzer, the verdict, calibration, the minimizer and the diagnosis, end to end on the
// built-in softmax kernels (a correct online softmax, a tail-mask leak, an online softmax without
// the rescale, no max subtraction).
#include "gpuemu/engine/engine.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
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
// NaN over row 0 of a 95x7 @ 7x61 product whose row 0 held +-3.4025e38 (evidence/gpu/tf32.md). Under a
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
  // The H200's TF32 cuBLAS and cuDNN lost products 2^-149 * 2^127 = 2^-22 (evidence/gpu/tf32.md):
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

// The same rounding in attention (flash_attention, decode_attention, flash_attention_backward under
// a policy of the attention family): an operand that TF32 makes Inf reaches whole rows through the
// softmax. q row i: its output row; a key row (a masked one too: the math formulation adds the -Inf
// mask to +Inf): every row; a value v_jc: column c of every row. A correct TF32 attention (the Python
// emulation in tests/python/test_precision.py) gave NaN rows of boundary cases there. Marked only
// under the policy, only where such an operand reaches, and finite results are still judged.
TestCase attention_policy_case(const char* op, const char* policy, std::uint64_t seed) {
  const OpSchema& schema = *engine().catalogue().find(op);
  FuzzOptions o;
  o.precision[op] = policy;
  o.dtypes = {DType::float32};
  o.layouts = false;
  o.distribution = Distribution::regular;
  if (std::string(op) == "decode_attention") {
    o.dims = {{"B", {2}}, {"H", {2}}, {"Hkv", {1}}, {"L", {6}}, {"D", {4}}};
  } else {
    o.dims = {{"B", {1}}, {"H", {2}}, {"Hkv", {2}}, {"Lq", {4}}, {"Lk", {5}}, {"D", {8}}};
    o.attrs = Json{{"causal", false}, {"scale", nullptr}, {"enable_gqa", false}};
    // The backward without the saved out and lse (autograd's mode): the reference's own exact
    // forward stays consistent with the planted operand.
    if (std::string(op) == "flash_attention_backward") o.present = {{"out", false}, {"lse", false}};
  }
  TestCase c = CaseGenerator(schema, o).generate(seed, 0).value();
  for (auto& [name, t] : c.inputs) t = t.contiguous();  // storages of their own
  return c;
}

// Which elements of each output the reference lets be NaN.
std::vector<std::vector<bool>> nan_allowed(const std::vector<RefOutput>& ref) {
  std::vector<std::vector<bool>> r;
  for (const RefOutput& o : ref) {
    std::vector<bool> m(static_cast<std::size_t>(shape_numel(o.shape)), false);
    for (std::size_t i = 0; i < o.alt_nonfinite.size(); ++i) m[i] = (o.alt_nonfinite[i] & k_alt_nan) != 0;
    r.push_back(std::move(m));
  }
  return r;
}

TEST(Precision, AnAttentionOperandThatOverflowsTf32MayMakeTheRowsItReachesNonFinite) {
  constexpr double big = 0x1.fffp127, below = 0x1.ffdp127;  // Inf in TF32; the largest that is not
  struct Scenario {
    const char* op;
    const char* what;
    // Sets one operand to `value` (its partners tiny, so no exact product nears fp32's range) and
    // says which elements of output `o` an Inf there reaches.
    std::function<void(TestCase&, double)> plant;
    std::function<bool(std::size_t o, std::int64_t flat)> reached;
    // A value past a quarter of fp32's range is already indeterminate without a policy (a flash
    // kernel's unnormalised sum of exp(s - m)·v may overflow: overflow_guard).
    bool ieee_accepts = false;
  };
  // flash_attention [1, 2, 4, 8] and its backward; q, k, v of head h at row i, column c: ((h * L + i) * 8 + c)
  auto tiny_column = [](Tensor& t, std::int64_t c, std::int64_t d, double factor = 1e-33) {
    for (std::int64_t x = 0; x < t.numel(); ++x)
      if (x % d == c) t.set_flat(x, t.get_flat(x) * factor);
  };
  const std::vector<Scenario> scenarios = {
      {"flash_attention", "q[0, 0, 1, 2]",
       [&](TestCase& c, double x) { c.inputs.at("q").set_flat((0 * 4 + 1) * 8 + 2, x); tiny_column(c.inputs.at("k"), 2, 8); },
       [](std::size_t, std::int64_t f) { return f / 8 == 1; }},  // head 0, row 1
      {"flash_attention", "k[0, 1, 3, 5]",
       [&](TestCase& c, double x) { c.inputs.at("k").set_flat((1 * 5 + 3) * 8 + 5, x); tiny_column(c.inputs.at("q"), 5, 8); },
       [](std::size_t, std::int64_t f) { return f / 32 == 1; }},  // every row of head 1
      {"flash_attention", "v[0, 0, 3, 4]",
       [&](TestCase& c, double x) { c.inputs.at("v").set_flat((0 * 5 + 3) * 8 + 4, x); },
       [](std::size_t, std::int64_t f) { return f / 32 == 0 && f % 8 == 4; },  // column 4 of head 0
       true},
      // decode [2, 2, 4] against caches [2, 1, 6, 4]: batch 0 attends 3 positions; a key past them
      {"decode_attention", "k_cache[0, 0, 5, 1] (past seq_lens[0] = 3)",
       [&](TestCase& c, double x) {
         Tensor& lens = c.inputs.at("seq_lens");
         lens.set_flat(0, 3.0), lens.set_flat(1, 6.0);
         c.inputs.at("k_cache").set_flat(5 * 4 + 1, x);
         tiny_column(c.inputs.at("q"), 1, 4);
       },
       [](std::size_t, std::int64_t f) { return f / 8 == 0; }},  // both heads of batch 0
      {"decode_attention", "q[1, 1, 2]",
       [&](TestCase& c, double x) {
         c.inputs.at("seq_lens").set_flat(1, 6.0);
         c.inputs.at("q").set_flat((1 * 2 + 1) * 4 + 2, x);
         tiny_column(c.inputs.at("k_cache"), 2, 4);
       },
       [](std::size_t, std::int64_t f) { return f / 4 == 3; }},  // batch 1, head 1
      // grad_q row 1 of head 0; grad_k and grad_v of KV head 0 (P's and dS's rows reach every key).
      // k's column tinier: the backward's P is recomputed from scores whose TF32 error (2^-11 of
      // q·k) must stay well under a nat, or the policy's relative term already marks the head.
      {"flash_attention_backward", "q[0, 0, 1, 2]",
       [&](TestCase& c, double x) { c.inputs.at("q").set_flat((0 * 4 + 1) * 8 + 2, x); tiny_column(c.inputs.at("k"), 2, 8, 1e-36); },
       [](std::size_t o, std::int64_t f) { return o == 0 ? f / 8 == 1 : f / 40 == 0; }},
      {"flash_attention_backward", "grad_out[0, 1, 2, 3]",
       [&](TestCase& c, double x) {
         c.inputs.at("grad_out").set_flat((1 * 4 + 2) * 8 + 3, x);
         tiny_column(c.inputs.at("v"), 3, 8);
       },
       [](std::size_t o, std::int64_t f) { return o == 0 ? f / 8 == 4 + 2 : f / 40 == 1; }},
      {"flash_attention_backward", "v[0, 1, 0, 6]",
       [&](TestCase& c, double x) { c.inputs.at("v").set_flat((1 * 5 + 0) * 8 + 6, x); tiny_column(c.inputs.at("grad_out"), 6, 8); },
       [](std::size_t o, std::int64_t f) { return o == 0 ? f / 32 == 1 : f / 40 == 1; }},  // all of head 1
  };
  for (const Scenario& sc : scenarios) {
    SCOPED_TRACE(std::string(sc.op) + " " + sc.what);
    const OpSchema& schema = *engine().catalogue().find(sc.op);
    // One case, three ways: the operand at TF32's Inf under the policy, just below it (where the
    // policy's other terms may already mark rows it cannot resolve), and at it under IEEE.
    auto refs = [&](const char* policy, double value) {
      TestCase c = attention_policy_case(sc.op, policy, 3);
      sc.plant(c, value);
      const RefContext ctx = case_ref_context(schema, c).value();
      return std::make_pair(ctx, run_reference(schema, ctx).value());
    };
    const auto [ctx, ref] = refs("tf32", big);
    const auto [ieee_ctx, ieee_ref] = refs("ieee", big);
    const auto marked = nan_allowed(ref), below_marked = nan_allowed(refs("tf32", below).second);
    std::size_t new_marks = 0;
    for (std::size_t o = 0; o < ref.size(); ++o)
      for (std::int64_t f = 0; f < static_cast<std::int64_t>(marked[o].size()); ++f) {
        const auto x = static_cast<std::size_t>(f);
        if (sc.reached(o, f))
          EXPECT_TRUE(marked[o][x]) << ref[o].name << " " << f << " is reached";
        else
          EXPECT_FALSE(marked[o][x] && !below_marked[o][x]) << ref[o].name << " " << f << " is not reached";
        new_marks += marked[o][x] && !below_marked[o][x];
      }
    EXPECT_GT(new_marks, 0u) << "the rule marks what the policy's other terms do not";
    // The kernel's answer: the reference, NaN wherever the operand reaches: passes under the
    // policy; a NaN anywhere else fails.
    std::vector<Tensor> answer;
    for (const RefOutput& o : ref) {
      auto vals = o.value;
      for (std::size_t x = 0; x < vals.size(); ++x)
        if (sc.reached(static_cast<std::size_t>(&o - ref.data()), static_cast<std::int64_t>(x)))
          vals[x] = std::numeric_limits<double>::quiet_NaN();
      answer.push_back(Tensor::from_values(o.dtype, o.shape, vals));
    }
    const auto v = judge(schema, ctx, ref, answer, 2.0);
    EXPECT_TRUE(v.passed) << v.message;
    EXPECT_EQ(judge(schema, ieee_ctx, ieee_ref, answer, 2.0).passed, sc.ieee_accepts) << "the same NaN without the policy";
    for (std::size_t o = 0; o < ref.size(); ++o) {
      std::size_t other = 0;
      while (other < marked[o].size() && marked[o][other]) ++other;
      if (other == marked[o].size()) continue;  // every element of this output is reached
      auto bad = answer;
      bad[o].set_flat(static_cast<std::int64_t>(other), std::numeric_limits<double>::quiet_NaN());
      EXPECT_FALSE(judge(schema, ctx, ref, bad, 2.0).passed) << ref[o].name << " " << other;
    }
  }
}

// And an operand below fp32's normal range that TF32 loses (the policy's floor, as in the GEMMs
// above). TF32's relative rounding (2^-10 per operand) already allows 2^-9 of Σ_j p_ij|v_jd| in
// P·V, so the floor decides only where a lost product outgrows that: a score scaled up (here q =
// 2^-137, lost to TF32's tie-to-even 0, against k = 2^127·1.999, scale 8: 2^-6 of score), or a
// probability below TF32's grid against a large value, the other values tiny (p = 2^-139 becomes 0:
// all of the output's 9·10^-5).
double tf32_round(double x) {  // round to nearest even on TF32's grid (10 fraction bits), subnormals too
  const int e = std::max(std::ilogb(x), -126);
  const double q = std::ldexp(1.0, e - 10);
  return std::nearbyint(x / q) * q;
}

TEST(Precision, AnAttentionOperandThatTf32LosesBelowTheNormalRangeIsWithinThePolicysFloor) {
  const OpSchema& schema = *engine().catalogue().find("flash_attention");
  // q, k, v of head 0: [4, 8], [5, 8], [5, 8]; row 1 of q tiny but for entry 0, so that its
  // scores are what the scenario plants.
  auto planted = [&](const char* policy, const std::function<void(TestCase&)>& plant) {
    TestCase c = attention_policy_case("flash_attention", policy, 3);
    Tensor& q = c.inputs.at("q");
    for (std::int64_t x = 1; x < 8; ++x) q.set_flat(8 + x, q.get_flat(8 + x) * 1e-30);
    plant(c);
    return c;
  };
  // `plant` sets the operands; `answer` gives a correct TF32 kernel's output from that case and
  // its reference.
  using Answer = std::function<std::vector<double>(const TestCase&, const std::vector<RefOutput>&)>;
  auto judge_both = [&](const std::function<void(TestCase&)>& plant, const Answer& answer, const char* what) {
    SCOPED_TRACE(what);
    for (const char* policy : {"tf32", "ieee"}) {
      const TestCase c = planted(policy, plant);
      const RefContext ctx = case_ref_context(schema, c).value();
      const auto ref = run_reference(schema, ctx).value();
      std::vector<double> vals = answer(c, ref);
      double moved = 0.0;
      for (std::int64_t x = 0; x < 8; ++x) moved = std::max(moved, std::fabs(vals[8 + x] - ref[0].value[8 + x]));
      EXPECT_GT(moved, 5e-5) << "the lost operand moves row 1";
      const auto out = [&](const std::vector<double>& v) { return Tensor::from_values(ref[0].dtype, ref[0].shape, v); };
      const auto v = judge(schema, ctx, ref, {out(vals)}, 2.0);
      EXPECT_EQ(v.passed, std::string(policy) == "tf32") << policy << ": " << v.message;
      if (std::string(policy) == "tf32") {  // the floor hides nothing else: 5% off in that row fails
        for (std::int64_t x = 0; x < 8; ++x) vals[8 + x] *= 1.05;
        EXPECT_FALSE(judge(schema, ctx, ref, {out(vals)}, 2.0).passed);
      }
    }
  };
  auto rounded = [](const std::vector<RefOutput>& ref) {
    std::vector<double> v(ref[0].value.begin(), ref[0].value.end());
    for (auto& x : v) x = round_to(DType::float32, x);
    return v;
  };
  const auto plant_score = [](double q10) {
    return [q10](TestCase& c) {
      c.attrs["scale"] = 8.0;
      Tensor& k = c.inputs.at("k");
      for (std::int64_t x = 0; x < 40; x += 8) k.set_flat(x, k.get_flat(x) * 1e-30);  // k[:, 0]
      k.set_flat(0, 0x1.ffcp127);
      c.inputs.at("q").set_flat(8, q10);
    };
  };
  judge_both(
      plant_score(0x1.0p-137),
      [&](const TestCase&, const std::vector<RefOutput>&) {  // the attention of q[0, 0, 1, 0] = 0
        const TestCase lost = planted("ieee", plant_score(0.0));
        return rounded(run_reference(schema, case_ref_context(schema, lost).value()).value());
      },
      "the score: q[0, 0, 1, 0] = 2^-137 against k[0, 0, 0, 0] = 2^127·1.999, scale 8");
  judge_both(
      [](TestCase& c) {
        c.attrs["scale"] = 1.0;
        Tensor& q = c.inputs.at("q");
        Tensor& k = c.inputs.at("k");
        Tensor& v = c.inputs.at("v");
        // Row 1's scores -95 for key 0 and 0 for the rest (p_0 = 2^-139, which TF32 rounds to 0;
        // TF32's relative error of the score itself moves p_0 by 9% only); v's column 0 tiny but
        // for key 0's 1.5·2^125 (below a quarter of fp32's range, where a flash kernel's
        // unnormalised sum would make the column indeterminate anyway).
        q.set_flat(8, 1.0);
        for (std::int64_t j = 0; j < 5; ++j) k.set_flat(j * 8, j == 0 ? -95.0 : 0.0);
        for (std::int64_t j = 0; j < 5; ++j) v.set_flat(j * 8, j == 0 ? 0x1.8p125 : v.get_flat(j * 8) * 1e-30);
      },
      [&](const TestCase& c, const std::vector<RefOutput>& ref) {
        // Row 1's p_0 (below 2^-126) rounded to TF32 before it meets v_00: out[1, 0] moves by
        // (tf32(p_0) - p_0)·v_00; the rest is the reference, TF32's relative rounding being the
        // policy's other terms.
        const Tensor& q = c.inputs.at("q");
        const Tensor& k = c.inputs.at("k");
        double sum = 0.0, s0 = 0.0;
        for (std::int64_t j = 0; j < 5; ++j) {
          double dot = 0.0;
          for (std::int64_t x = 0; x < 8; ++x) dot += q.get_flat(8 + x) * k.get_flat(j * 8 + x);
          sum += std::exp(dot);
          if (j == 0) s0 = dot;
        }
        const double p0 = std::exp(s0) / sum;
        EXPECT_LT(p0, 0x1.0p-126);
        EXPECT_NE(tf32_round(p0), p0);
        std::vector<double> v(ref[0].value.begin(), ref[0].value.end());
        v[8] += (tf32_round(p0) - p0) * c.inputs.at("v").get_flat(0);
        for (auto& x : v) x = round_to(DType::float32, x);
        return v;
      },
      "P·V: row 1's p_0 = 2^-139 against v[0, 0, 0, 0] = 1.5·2^125");
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
