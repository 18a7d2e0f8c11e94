// Unary elementwise ops (relu ... rsqrt): fp64 references with their condition terms, correct
// fp32 "opmath" controls (PyTorch's formulas, and the fast exp2-based forms Triton/CUDA fast-math
// kernels use), and known-buggy kernels. The scalar maths lives in elementwise_math.hpp; add, mul,
// swiglu and geglu in elementwise_binary_ops.cpp.
//
// Error model (docs/error-model.md): per element c_acc = |x f'(x)| + |f(x)|, the magnitude an
// fp32 evaluation of f perturbs (argument rounding amplified by the derivative, plus the result's
// own rounding), plus, where PyTorch's own formula cancels, the magnitude of the cancelling
// intermediate: gelu's 0.5x(1 + erf) / 0.5x(1 + tanh) lose u_fp32 * 0.5|x| for x < 0, and elu's
// alpha*(exp(x) - 1) (PyTorch's CPU kernel) loses u_fp32 * alpha*exp(x); silu's exp(-x) overflows
// for x < -88.7 (indeterminate there). c_acc is 0 where the reference or x is not finite.
#include "core/parallel.hpp"
#include "ops/elementwise_math.hpp"
#include "ops/register.hpp"

#include <atomic>
#include <cmath>

namespace gpuemu::ops {
namespace {

using namespace ew;

// ---------------------------------------------------------------------------------------------
// Drivers.
template <RefScalar F>
Result<std::vector<RefOutput>> unary_reference(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  const EwParams p = read_params(ctx);
  const auto n = static_cast<std::size_t>(x.numel());
  RefVec out(n), c_acc(n), c_in(n);
  std::atomic<bool> any_in{false};
  parallel_for(
      x.numel(),
      [&](std::int64_t b, std::int64_t e) {
        bool in = false;
        for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) {
          const RefPoint r = F(x.data[i], p);
          const bool ok = finite(r.value) && finite(x.data[i]);
          out[i] = r.value;
          c_acc[i] = ok ? r.c_acc : 0.0;
          c_in[i] = ok ? r.c_in : 0.0;
          in |= c_in[i] != 0.0;
        }
        if (in) any_in = true;
      },
      1 << 14);
  if (!any_in) c_in = RefVec();
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc), std::move(c_in));
}

template <RefScalar F>
ReferenceFn unary_ref() {
  return [](const RefContext& ctx) { return unary_reference<F>(ctx); };
}

// An elementwise kernel: f in fp32 on every element, output stored once. With `tail_unwritten`
// the launch covers numel / BLOCK programs, so the last partial block is never written (its
// memory keeps whatever was there: zeros here).
template <KernScalar F>
KernelFn unary_kernel(bool tail_unwritten = false) {
  return [tail_unwritten](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& x = ctx.input("x");
    const EwParams p = read_params(ctx);
    const DType od = ctx.output_dtype();
    const std::int64_t n = x.numel();
    const std::int64_t written = tail_unwritten ? n / k_ew_block * k_ew_block : n;
    std::vector<double> out(static_cast<std::size_t>(n), 0.0);
    parallel_for(
        written,
        [&](std::int64_t b, std::int64_t e) {
          for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i)
            out[i] = round_to(od, static_cast<double>(F(f32(x.data[i]), p)));
        },
        1 << 14);
    return KernelOutputs{std::move(out)};
  };
}

template <KernScalar F>
NamedKernel tail_bug() {
  return {"tail_unwritten",
          "BLOCK=1024 with a grid of numel // BLOCK: the last partial block is never written",
          unary_kernel<F>(true)};
}

template <RefScalar R, KernScalar K>
BuiltinOp unary_op(const char* name, std::vector<NamedKernel> controls,
                   std::vector<NamedKernel> buggy) {
  buggy.push_back(tail_bug<K>());
  return BuiltinOp{name, unary_ref<R>(), std::move(controls), std::move(buggy)};
}

const char* k_opmath =
    "fp32 math on the loaded values (PyTorch's opmath formula), output stored once";

}  // namespace

void register_elementwise_ops(BuiltinRegistry& r) {
  BuiltinOp relu = unary_op<ref_relu, k_relu>(
      "relu", {{"fp32_opmath", k_opmath, unary_kernel<k_relu>()}},
      {{"fmax_drops_nan", "fmaxf(x, 0): returns 0 for NaN where torch.relu propagates it",
        unary_kernel<k_relu_fmax>()}});
  relu.reference = exact_reference(std::move(relu.reference));  // max(x, 0) is x or 0
  r.add(std::move(relu));
  r.add(unary_op<ref_leaky_relu, k_leaky>(
      "leaky_relu",
      {{"fp32_opmath", k_opmath, unary_kernel<k_leaky>()},
       {"fp32_select", "x * (x > 0 ? 1 : slope)", unary_kernel<k_leaky_select>()}},
      {{"wrong_slope", "hard-codes slope 0.1 instead of the negative_slope attr (0.01)",
        unary_kernel<k_leaky_wrong_slope>()}}));
  r.add(unary_op<ref_gelu, k_gelu>(
      "gelu",
      {{"fp32_opmath", "0.5x(1 + erf(x/sqrt2)) or 0.5x(1 + tanh(...)) in fp32",
        unary_kernel<k_gelu>()},
       {"fp32_fast", "0.5x erfc(-x/sqrt2), or the tanh form as x*sigmoid(2y) with exp2",
        unary_kernel<k_gelu_fast>()}},
      {{"tanh_const_0044",
        "tanh approximation with 0.044 instead of 0.044715, whatever "
        "`approximate` says",
        unary_kernel<k_gelu_const_0044>()},
       {"sigmoid_approx", "x * sigmoid(1.702x) instead of the erf/tanh forms",
        unary_kernel<k_gelu_sigmoid_approx>()}}));
  r.add(unary_op<ref_silu, k_silu>(
      "silu",
      {{"fp32_opmath", "x / (1 + exp(-x)) in fp32", unary_kernel<k_silu>()},
       {"fp32_fast", "x * 1/(1 + exp2(-x*log2e))", unary_kernel<k_silu_fast>()}},
      {{"overflow_nan", "x * exp(x) / (1 + exp(x)): Inf/Inf = NaN for x > 88",
        unary_kernel<k_silu_overflow>()}}));
  r.add(unary_op<ref_sigmoid, k_sigmoid>(
      "sigmoid",
      {{"fp32_opmath", "1 / (1 + exp(-x)) in fp32", unary_kernel<k_sigmoid>()},
       {"fp32_fast", "1 / (1 + exp2(-x*log2e))", unary_kernel<k_sigmoid_fast>()}},
      {{"overflow_nan", "exp(x) / (1 + exp(x)): NaN for x > 88",
        unary_kernel<k_sigmoid_overflow>()},
       {"tanh_half_wrong", "0.5*tanh(x) + 0.5 (should be tanh(x/2))",
        unary_kernel<k_sigmoid_tanh_half>()}}));
  r.add(unary_op<ref_tanh, k_tanh>(
      "tanh",
      {{"fp32_opmath", "tanhf", unary_kernel<k_tanh>()},
       {"fp32_expm1", "e = expm1(2 clamp(x, -10, 10)); e / (e + 2)", unary_kernel<k_tanh_expm1>()}},
      {{"overflow_nan", "(exp(2x) - 1) / (exp(2x) + 1): NaN for x > 44, cancellation near 0",
        unary_kernel<k_tanh_overflow>()}}));
  r.add(unary_op<ref_elu, k_elu>(
      "elu",
      {{"fp32_opmath", "alpha * (exp(x) - 1) for x <= 0 (PyTorch's CPU formula)",
        unary_kernel<k_elu>()},
       {"fp32_expm1", "alpha * expm1(x) for x <= 0", unary_kernel<k_elu_expm1>()}},
      {{"missing_minus_one", "alpha * exp(x) for x <= 0", unary_kernel<k_elu_no_minus_one>()}}));
  r.add(unary_op<ref_softplus, k_softplus>(
      "softplus",
      {{"fp32_opmath", "beta*x > threshold ? x : log1p(exp(beta*x)) / beta",
        unary_kernel<k_softplus>()},
       {"fp32_stable", "(max(bx, 0) + log1p(exp(-|bx|))) / beta below the threshold",
        unary_kernel<k_softplus_stable>()}},
      {{"naive_log_exp",
        "log(1 + exp(beta*x)) / beta, no threshold and no log1p: Inf for x > 88, "
        "0 for x < -17",
        unary_kernel<k_softplus_naive>()}}));
  r.add(unary_op<ref_exp, k_exp>(
      "exp",
      {{"fp32_opmath", "expf", unary_kernel<k_exp>()},
       {"fp32_fast", "exp2(x * log2e) (__expf / tl.exp)", unary_kernel<k_exp_fast>()}},
      {{"exp2_no_scale", "exp2(x): the log2(e) factor is missing",
        unary_kernel<k_exp2_no_scale>()}}));
  r.add(unary_op<ref_log, k_log>(
      "log",
      {{"fp32_opmath", "logf", unary_kernel<k_log>()},
       {"fp32_fast", "log2(x) * ln2 (__logf)", unary_kernel<k_log_fast>()}},
      {{"log2_no_scale", "log2(x): the ln2 factor is missing", unary_kernel<k_log2_no_scale>()},
       {"eps_added", "log(x + 1e-6) \"for stability\"", unary_kernel<k_log_eps>()}}));
  r.add(unary_op<ref_sqrt, k_sqrt>(
      "sqrt",
      {{"fp32_opmath", "sqrtf", unary_kernel<k_sqrt>()},
       {"fp32_rsqrt_reciprocal", "1 / rsqrt(x)", unary_kernel<k_sqrt_via_rsqrt>()}},
      {{"eps_added", "sqrt(x + 1e-6) \"for stability\"", unary_kernel<k_sqrt_eps>()}}));
  r.add(unary_op<ref_rsqrt, k_rsqrt>(
      "rsqrt",
      {{"fp32_opmath", "1 / sqrtf(x)", unary_kernel<k_rsqrt>()},
       {"fp32_rsqrt", "a hardware rsqrt (correctly rounded here)", unary_kernel<k_rsqrt_approx>()}},
      {{"eps_added", "1 / sqrt(x + 1e-6) \"for stability\"", unary_kernel<k_rsqrt_eps>()}}));
  register_binary_elementwise_ops(r);
}

}  // namespace gpuemu::ops
