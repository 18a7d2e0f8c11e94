// The diagnosis of each built-in bug's first failure names its class: tail masks, missing scales,
// accumulators overwritten or kept in low precision, a missing online-softmax rescale, wrong
// constants, overflows, eps placement; and a kernel that reads its input as contiguous storage is a
// stride assumption. Default settings (adversarial values, every dtype, layouts on).
#include "gpuemu/engine/engine.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

namespace gpuemu {
namespace {

Engine& engine() { return testing_support::source_engine(); }

struct Want {
  const char* op;
  const char* kernel;
  const char* bug_class;
};

std::string first_diagnosis(const std::string& op, const KernelRunner& k, std::uint64_t seed,
                            std::string* summary = nullptr, FuzzOptions options = {}) {
  FuzzRequest req;
  req.op = op;
  req.options = std::move(options);
  req.seed = seed;
  req.iterations = 40;
  req.fail_fast = true;
  req.diagnose_limit = 1;
  auto r = engine().fuzz(req, k);
  if (!r.ok()) return "error: " + r.error().message;
  if (r->failures.empty()) return "not caught";
  if (summary) *summary = r->failures[0].diagnosis.summary;
  return r->failures[0].diagnosis.bug_class;
}

void expect_classes(const std::vector<Want>& wants, std::uint64_t seed) {
  for (const Want& w : wants) {
    auto k = engine().builtin_kernel(w.op, w.kernel);
    ASSERT_TRUE(k.ok()) << w.op << " " << w.kernel;
    std::string summary;
    EXPECT_EQ(first_diagnosis(w.op, *k, seed, &summary), w.bug_class)
        << w.op << " " << w.kernel << ": " << summary;
  }
}

TEST(Diagnose, TailMasks) {
  expect_classes({{"softmax", "tail_leak", "tail_mask"},
                  {"log_softmax", "tail_leak", "tail_mask"},
                  {"matmul", "dropped_tail_k", "tail_mask"},
                  {"sum", "tail_dropped", "tail_mask"},  // BLOCK=1024
                  {"mean", "tail_dropped", "tail_mask"}},
                 31);
}

TEST(Diagnose, MissingScale) {
  expect_classes({{"flash_attention", "missing_scale", "missing_scale"},
                  {"decode_attention", "missing_scale", "missing_scale"},
                  {"log", "log2_no_scale", "missing_scale"}},
                 31);
}

TEST(Diagnose, AccumulatorOverwrittenOrInLowPrecision) {
  expect_classes({{"matmul", "acc_overwrite", "accumulation"},
                  {"cumsum", "carry_overwrite", "accumulation"},
                  {"mean", "acc_overwrite", "accumulation"},
                  {"matmul", "low_precision_acc", "accumulation"},
                  {"sum", "lowp_accumulator", "accumulation"},
                  {"layer_norm", "lowp_accumulator", "accumulation"},
                  {"cumsum", "lowp_running_sum", "accumulation"}},
                 31);
}

TEST(Diagnose, OnlineRescale) {
  expect_classes({{"softmax", "online_no_rescale", "online_rescale"},
                  {"logsumexp", "online_no_rescale", "online_rescale"},
                  {"flash_attention", "online_no_rescale", "online_rescale"}},
                 31);
}

TEST(Diagnose, WrongConstant) {
  expect_classes({{"gelu", "tanh_const_0044", "wrong_constant"},
                  {"geglu", "tanh_const_0044", "wrong_constant"},
                  {"leaky_relu", "wrong_slope", "wrong_constant"}},
                 31);
}

TEST(Diagnose, OverflowAndEps) {
  expect_classes({{"softmax", "no_max_subtraction", "overflow"},
                  {"cross_entropy", "no_max_subtraction", "overflow"},
                  {"rms_norm", "eps_outside_sqrt", "eps_placement"}},
                 31);
}

// A control that reads its input `x` as if it were contiguous from the start of its storage
// (x_ptr + row * N + col): right for contiguous inputs, wrong for any other layout.
KernelRunner assumes_contiguous(const std::string& op, const std::string& control) {
  KernelRunner inner = engine().builtin_kernel(op, control).value();
  return [inner](const TestCase& c) -> Result<std::vector<Tensor>> {
    TestCase as_read = c;
    const Tensor& x = c.inputs.at("x");
    const DType dt = x.dtype();
    const auto n = static_cast<std::size_t>(x.numel());
    std::vector<double> flat(n, 0.0);
    for (std::size_t i = 0; i < n && (i + 1) * dtype_size(dt) <= x.storage_bytes(); ++i)
      flat[i] = decode_element(dt, x.storage()->data() + i * dtype_size(dt));
    as_read.inputs.insert_or_assign("x", Tensor::from_values(dt, x.shape(), flat));
    return inner(as_read);
  };
}

// A control that ignores the attr it is given and uses a hard-coded value (rope's theta fixed
// at 10000, the Llama-2 default, whatever the model's theta is).
KernelRunner hard_coded(const std::string& op, const std::string& control, const std::string& attr,
                        const Json& value) {
  KernelRunner inner = engine().builtin_kernel(op, control).value();
  return [inner, attr, value](const TestCase& c) -> Result<std::vector<Tensor>> {
    TestCase as_run = c;
    as_run.attrs[attr] = value;
    return inner(as_run);
  };
}

TEST(Diagnose, HardCodedAttr) {
  FuzzOptions vary_theta;
  vary_theta.vary_attrs = {"theta"};
  std::string summary;
  EXPECT_EQ(first_diagnosis("rope", hard_coded("rope", "fp32_hf", "theta", 10000.0), 31, &summary,
                            vary_theta),
            "wrong_constant")
      << summary;
  EXPECT_NE(summary.find("theta=1e+04"), std::string::npos) << summary;
}

TEST(Diagnose, StrideAssumption) {
  for (const auto& [op, control] :
       {std::pair{"softmax", "fp32_two_pass"}, std::pair{"rms_norm", "fp32_two_pass"}}) {
    std::string summary;
    EXPECT_EQ(first_diagnosis(op, assumes_contiguous(op, control), 31, &summary),
              "stride_assumption")
        << op << ": " << summary;
  }
}

}  // namespace
}  // namespace gpuemu
