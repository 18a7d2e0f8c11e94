// fp8_quantize [x, scale] -> float8_e4m3fn: out = sat_e4m3fn(x / scale), saturating: |x / scale|
// beyond 448 (Inf included) becomes ±448, NaN stays NaN (torch.clamp(x / scale, -448, 448)
// .to(torch.float8_e4m3fn), the cast every fp8 recipe uses; dtype.hpp's Overflow::saturate).
// scaled_fp8_matmul [a[M,K], b[K,N] in e4m3fn, scale_a, scale_b fp32 scalars; out_dtype]:
// out = (a·b)·scale_a·scale_b rounded to out_dtype, as torch._scaled_mm with per-tensor scales.
//
// Error model. fp8_quantize: the reference is the fp64 quotient clamped to ±448 (not rounded:
// u_out·|ref| is the e4m3 rounding); kernels divide in fp32, so c_acc = min(|x / scale|, 448).
// scaled_fp8_matmul: products of e4m3 values are exact in fp32, the sum is an fp32 dot product:
// c_acc = (|a|·|b|)·sqrt(K)·|scale_a·scale_b|, as for matmul.
#include "ops/gemm_blas.hpp"
#include "ops/gemm_emulation.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <cmath>

namespace gpuemu::ops {
namespace {

using KernelOut = Result<std::vector<std::vector<double>>>;

constexpr double k_e4m3_max = 448.0;

Result<double> scalar_input(const RefContext& ctx, std::string_view name) {
  const RefArg& s = ctx.input(name);
  if (s.numel() != 1)
    return make_error(ErrorCode::shape_mismatch,
                      std::string(name) + " must hold one value, got " + shape_to_string(s.shape));
  return s.data[0];
}

// ---- fp8_quantize ----

Result<std::vector<RefOutput>> quantize_reference(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(double scale, scalar_input(ctx, "scale"));
  RefVec value(x.data.size()), c_acc(x.data.size());
  for (std::size_t i = 0; i < x.data.size(); ++i) {
    const double q = x.data[i] / scale;
    value[i] = std::isnan(q) ? q : std::clamp(q, -k_e4m3_max, k_e4m3_max);
    c_acc[i] = std::isnan(q) ? 0.0 : std::min(std::fabs(q), k_e4m3_max);
  }
  return single_output(DType::float8_e4m3fn, x.shape, std::move(value), std::move(c_acc));
}

enum class QuantKind {
  divide_clamp,     // clamp(x / scale, ±448) in fp32, then the cast
  reciprocal,       // x · (1 / scale) in fp32, clamp, cast
  saturating_cast,  // x / scale, then a saturating conversion (cvt.satfinite) without a clamp
  // bugs
  no_saturation,       // x / scale cast without the clamp: NaN past 464
  multiply_by_scale,   // x · scale
  clamp_before_scale,  // clamp(x, ±448) / scale: the clamp before the division
};

KernelFn quantize_kernel(QuantKind kind) {
  return [kind](const RefContext& ctx) -> KernelOut {
    const RefArg& x = ctx.input("x");
    GPUEMU_TRY(double scale_d, scalar_input(ctx, "scale"));
    const float scale = f32(scale_d), lim = static_cast<float>(k_e4m3_max);
    auto clamp = [lim](float v) { return std::isnan(v) ? v : std::clamp(v, -lim, lim); };
    std::vector<double> out(x.data.size());
    for (std::size_t i = 0; i < x.data.size(); ++i) {
      const float xv = f32(x.data[i]);
      float q = 0.0f;
      Overflow overflow = Overflow::to_nan;
      switch (kind) {
        case QuantKind::divide_clamp:
          q = clamp(xv / scale);
          break;
        case QuantKind::reciprocal:
          q = clamp(xv * (1.0f / scale));
          break;
        case QuantKind::saturating_cast:
          q = xv / scale, overflow = Overflow::saturate;
          break;
        case QuantKind::no_saturation:
          q = xv / scale;
          break;
        case QuantKind::multiply_by_scale:
          q = clamp(xv * scale);
          break;
        case QuantKind::clamp_before_scale:
          q = clamp(xv) / scale;
          break;
      }
      out[i] = round_to(DType::float8_e4m3fn, static_cast<double>(q), overflow);
    }
    return std::vector<std::vector<double>>{std::move(out)};
  };
}

BuiltinOp make_quantize() {
  BuiltinOp op;
  op.name = "fp8_quantize";
  op.reference = quantize_reference;
  op.controls = {
      {"fp32_divide_clamp", "clamp(x / scale, -448, 448) in fp32, cast to e4m3fn",
       quantize_kernel(QuantKind::divide_clamp)},
      {"fp32_reciprocal", "x · (1 / scale) in fp32 (a precomputed inverse scale), clamp, cast",
       quantize_kernel(QuantKind::reciprocal)},
      {"saturating_cast", "x / scale converted with a saturating cvt (satfinite), no clamp",
       quantize_kernel(QuantKind::saturating_cast)},
  };
  op.buggy = {
      {"no_saturation", "x / scale cast without clamping: NaN where |x / scale| > 464",
       quantize_kernel(QuantKind::no_saturation)},
      {"multiply_by_scale", "x · scale instead of x / scale (scale != 1)",
       quantize_kernel(QuantKind::multiply_by_scale)},
      {"clamp_before_scale", "clamp(x, ±448) / scale: clamps the input, not the quotient",
       quantize_kernel(QuantKind::clamp_before_scale)},
  };
  return op;
}

// ---- scaled_fp8_matmul ----

struct Fp8Problem {
  std::int64_t M = 0, K = 0, N = 0;
  const double *a = nullptr, *b = nullptr;
  double scale_a = 1.0, scale_b = 1.0;
  DType out_dtype = DType::bfloat16;
};

Result<Fp8Problem> fp8_problem(const RefContext& ctx) {
  const RefArg &a = ctx.input("a"), &b = ctx.input("b");
  if (a.shape.size() != 2 || b.shape.size() != 2 || a.shape[1] != b.shape[0])
    return make_error(ErrorCode::shape_mismatch, "scaled_fp8_matmul needs a[M,K] and b[K,N], got " +
                                                     shape_to_string(a.shape) + " and " +
                                                     shape_to_string(b.shape));
  Fp8Problem p;
  p.M = a.shape[0], p.K = a.shape[1], p.N = b.shape[1];
  p.a = a.data.data(), p.b = b.data.data();
  GPUEMU_TRY(p.scale_a, scalar_input(ctx, "scale_a"));
  GPUEMU_TRY(p.scale_b, scalar_input(ctx, "scale_b"));
  const std::string name =
      ctx.attr_is_null("out_dtype") ? "bfloat16" : ctx.attr_string("out_dtype");
  const auto dt = parse_dtype(name);
  if (!dt || (*dt != DType::bfloat16 && *dt != DType::float16 && *dt != DType::float32))
    return make_error(
        ErrorCode::invalid_argument,
        "scaled_fp8_matmul: out_dtype must be bfloat16, float16 or float32, got '" + name + "'");
  p.out_dtype = *dt;
  return p;
}

Result<std::vector<RefOutput>> fp8_matmul_reference(const RefContext& ctx) {
  GPUEMU_TRY(Fp8Problem p, fp8_problem(ctx));
  const double s = p.scale_a * p.scale_b;
  RefVec value = gemm_reference_value_only(p.a, p.b, p.M, p.K, p.N);
  for (auto& v : value) v *= s;
  RefVec c_acc = abs_gemm_condition(p.a, p.b, p.M, p.N, p.K, false, sqrt_len(p.K) * std::fabs(s));
  return single_output(p.out_dtype, {p.M, p.N}, std::move(value), std::move(c_acc));
}

enum class Fp8Epilogue { combined_scale, sequential_scales, missing_scale_b, scales_divided };

KernelFn fp8_kernel(GemmEmulation cfg, Fp8Epilogue epi) {
  return [cfg, epi](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(Fp8Problem p, fp8_problem(ctx));
    GemmEmulation run = cfg;
    if (run.bug == GemmBug::low_precision_acc)
      run.low_dtype = p.out_dtype == DType::float32 ? DType::bfloat16 : p.out_dtype;
    const std::vector<float> a = to_f32(p.a, p.M * p.K), b = to_f32(p.b, p.K * p.N);
    const std::vector<float> acc = emulate_gemm(a.data(), b.data(), p.M, p.K, p.N, run);
    const float sa = f32(p.scale_a), sb = f32(p.scale_b);
    std::vector<double> out(acc.size());
    for (std::size_t i = 0; i < acc.size(); ++i) {
      float v = acc[i];
      switch (epi) {
        case Fp8Epilogue::combined_scale:
          v *= sa * sb;
          break;
        case Fp8Epilogue::sequential_scales:
          v = (v * sa) * sb;
          break;
        case Fp8Epilogue::missing_scale_b:
          v *= sa;
          break;
        case Fp8Epilogue::scales_divided:
          v /= sa * sb;
          break;
      }
      out[i] = round_to(p.out_dtype, static_cast<double>(v));
    }
    return std::vector<std::vector<double>>{std::move(out)};
  };
}

GemmEmulation fp8_gemm(std::int64_t block_k, std::int64_t split_k = 1,
                       GemmBug bug = GemmBug::none) {
  GemmEmulation g;
  g.block_k = block_k;
  g.split_k = split_k;
  g.bug = bug;
  return g;
}

BuiltinOp make_fp8_matmul() {
  BuiltinOp op;
  op.name = "scaled_fp8_matmul";
  op.reference = fp8_matmul_reference;
  op.controls = {
      {"fp32_k64_combined_scale", "fp32 accumulator over BLOCK_K=64 tiles, times (scale_a·scale_b)",
       fp8_kernel(fp8_gemm(64), Fp8Epilogue::combined_scale)},
      {"fp32_k128_sequential_scales", "BLOCK_K=128 tiles, (acc·scale_a)·scale_b",
       fp8_kernel(fp8_gemm(128), Fp8Epilogue::sequential_scales)},
      {"fp32_split_k4", "split-K in 4 chunks of BLOCK_K=64 tiles, fp32 partials summed",
       fp8_kernel(fp8_gemm(64, 4), Fp8Epilogue::combined_scale)},
  };
  op.buggy = {
      {"missing_scale_b", "the epilogue applies scale_a only (scale_b != 1)",
       fp8_kernel(fp8_gemm(64), Fp8Epilogue::missing_scale_b)},
      {"scales_divided", "divides by scale_a·scale_b (inverse-scale convention mixed up)",
       fp8_kernel(fp8_gemm(64), Fp8Epilogue::scales_divided)},
      {"acc_overwrite", "BLOCK_K=64 with `acc = dot` instead of `acc +=` (K > 64)",
       fp8_kernel(fp8_gemm(64, 1, GemmBug::acc_overwrite), Fp8Epilogue::combined_scale)},
      {"low_precision_acc",
       "accumulates in the output dtype (bf16 for fp32 outputs), rounded "
       "after every product",
       fp8_kernel(fp8_gemm(64, 1, GemmBug::low_precision_acc), Fp8Epilogue::combined_scale)},
  };
  return op;
}

}  // namespace

void register_quant_ops(BuiltinRegistry& r) {
  r.add(make_quantize());
  r.add(make_fp8_matmul());
}

}  // namespace gpuemu::ops
