// The scalar maths of the elementwise family, shared by the unary ops (elementwise_ops.cpp) and
// the binary and gated ones (elementwise_binary_ops.cpp): the family's attrs, the fp64 reference
// functions with their condition terms (value and c_acc, before the finiteness guard), and the
// fp32 bodies of the emulated kernels (inputs are the case dtype's values, exact in float).
#pragma once

#include "gpuemu/engine/op.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace gpuemu::ops {

// Registers add, mul (broadcasting) and swiglu, geglu (gated); called by register_elementwise_ops.
void register_binary_elementwise_ops(BuiltinRegistry& r);

namespace ew {

inline constexpr double k_sqrt1_2 = 0.70710678118654752440;
inline constexpr double k_sqrt_2_over_pi = 0.79788456080286535588;
inline constexpr double k_inv_sqrt_2pi = 0.39894228040143267794;
inline constexpr double k_gelu_cubic = 0.044715;
inline constexpr float k_log2e_f = 1.44269504f;
inline constexpr float k_ln2_f = 0.693147181f;
// Elementwise kernels process BLOCK elements per program; the tail bug launches numel / BLOCK.
inline constexpr std::int64_t k_ew_block = 1024;

// The attrs of the elementwise family, read once per call.
struct EwParams {
  double slope = 0.01, alpha = 1.0, beta = 1.0, threshold = 20.0;
  bool tanh_approx = false;
};

inline double attr_or(const RefContext& ctx, const char* name, double fallback) {
  auto it = ctx.attrs.find(name);
  return it != ctx.attrs.end() && it->is_number() ? it->get<double>() : fallback;
}

inline EwParams read_params(const RefContext& ctx) {
  EwParams p;
  p.slope = attr_or(ctx, "negative_slope", p.slope);
  p.alpha = attr_or(ctx, "alpha", p.alpha);
  p.beta = attr_or(ctx, "beta", p.beta);
  p.threshold = attr_or(ctx, "threshold", p.threshold);
  auto it = ctx.attrs.find("approximate");
  if (it != ctx.attrs.end() && !it->is_null()) {
    const std::string a = it->is_string() ? it->get<std::string>() : "";
    if (a != "none" && a != "tanh")
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "approximate must be 'none' or 'tanh', got " + it->dump()));
    p.tanh_approx = a == "tanh";
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// fp64 references: value and c_acc (without the finiteness guard, applied by the driver).
struct RefPoint {
  double value, c_acc;
  double c_in = 0.0;  // what legitimately passes through the input dtype (0 for most ops)
};
using RefScalar = RefPoint (*)(double, const EwParams&);

inline double sigmoid64(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// GELU's 1 + erf(x/√2) and 1 + tanh(y): fp32 implementations of erf and tanh are accurate to an
// absolute error, not a relative one, near 0 as near ±1 (PyTorch's vectorised CPU erf, a
// 1 - t·poly(t)·exp(-y²) approximation, measured 8.4·2^-24 ≈ 5.0e-7 inside GELU; CUDA's erff and
// tanhf are within 2 ulp, 4·2^-24 next to ±1). That error times 0.5|x| is what the result keeps,
// whatever the sign of x; in units of u_fp32:
inline constexpr double k_gelu_erf_abs_error = 8.0;

inline RefPoint gelu64(double x, bool tanh_approx) {
  double v = 0.0, d = 0.0;
  if (tanh_approx) {
    // 0.5x(1 + tanh(y)) == x * sigmoid(2y): no cancellation in double for x << 0.
    const double y = k_sqrt_2_over_pi * (x + k_gelu_cubic * x * x * x);
    const double s = sigmoid64(2.0 * y);
    v = x * s;
    d = s + x * 2.0 * s * (1.0 - s) * k_sqrt_2_over_pi * (1.0 + 3.0 * k_gelu_cubic * x * x);
  } else {
    const double phi_cdf = 0.5 * std::erfc(-x * k_sqrt1_2);
    v = x * phi_cdf;
    d = phi_cdf + x * k_inv_sqrt_2pi * std::exp(-0.5 * x * x);
  }
  return {v, std::fabs(x * d) + std::fabs(v) + 0.5 * std::fabs(x) * k_gelu_erf_abs_error};
}

// For x < -88.7 the fp32 formula's exp(-x) overflows and a correct kernel returns -0 while the
// result (down to -1e-43) is still a normal number: overflow_guard makes those elements
// indeterminate.
inline RefPoint silu64(double x) {
  const double s = sigmoid64(x);
  const double v = x / (1.0 + std::exp(-x));
  return {v, overflow_guard(std::fabs(x * s * (1.0 + x * (1.0 - s))) + std::fabs(v), std::exp(-x))};
}

inline RefPoint ref_relu(double x, const EwParams&) {
  const double v = x < 0 ? 0.0 : x;  // clamp_min(x, 0): NaN and -0 pass through
  return {v, 2.0 * std::fabs(v)};
}
inline RefPoint ref_leaky_relu(double x, const EwParams& p) {
  const double v = x > 0 ? x : x * p.slope;
  return {v, 2.0 * std::fabs(v)};
}
inline RefPoint ref_gelu(double x, const EwParams& p) {
  return gelu64(x, p.tanh_approx);
}
// PyTorch's own silu on bf16 and fp16 tensors is x / (1 + exp(-x)) with exp(-x) and 1 + exp(-x)
// held in the input dtype (bit for bit over every bf16 value in [-10, 10]): two roundings of a
// denominator >= 1, each at most u_in relative, with no cancellation after them: c_in = 2|silu|.
inline RefPoint ref_silu(double x, const EwParams&) {
  RefPoint r = silu64(x);
  r.c_in = 2.0 * std::fabs(r.value);
  return r;
}
inline RefPoint ref_sigmoid(double x, const EwParams&) {
  const double s = sigmoid64(x);
  return {s, std::fabs(x) * s * (1.0 - s) + s};
}
inline RefPoint ref_tanh(double x, const EwParams&) {
  const double t = std::tanh(x);
  return {t, std::fabs(x) * (1.0 - t * t) + std::fabs(t)};
}
inline RefPoint ref_elu(double x, const EwParams& p) {
  if (x > 0) return {x, 2.0 * x};
  const double e = std::exp(x);
  const double v = p.alpha * std::expm1(x);
  return {v, std::fabs(x * p.alpha * e) + std::fabs(v) + std::fabs(p.alpha) * e};
}
inline RefPoint ref_softplus(double x, const EwParams& p) {
  if (x * p.beta > p.threshold) return {x, 2.0 * std::fabs(x)};
  const double v = std::log1p(std::exp(p.beta * x)) / p.beta;
  return {v, std::fabs(x) * sigmoid64(p.beta * x) + std::fabs(v)};
}
inline RefPoint ref_exp(double x, const EwParams&) {
  const double v = std::exp(x);
  return {v, (std::fabs(x) + 1.0) * v};
}
inline RefPoint ref_log(double x, const EwParams&) {
  const double v = std::log(x);
  return {v, 1.0 + std::fabs(v)};
}
inline RefPoint ref_sqrt(double x, const EwParams&) {
  const double v = std::sqrt(x);
  return {v, 1.5 * std::fabs(v)};
}
inline RefPoint ref_rsqrt(double x, const EwParams&) {
  const double v = 1.0 / std::sqrt(x);
  return {v, 1.5 * std::fabs(v)};
}

// ---------------------------------------------------------------------------------------------
// fp32 kernel bodies (inputs are the case dtype's values, exact in float).
using KernScalar = float (*)(float, const EwParams&);

inline float sigmoid_f(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float sigmoid_fast_f(float x) {
  return 1.0f / (1.0f + std::exp2(-x * k_log2e_f));
}
inline float gelu_erf_f(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.707106781f));
}
inline float gelu_tanh_f(float x, float cubic) {
  return 0.5f * x * (1.0f + std::tanh(0.797884561f * (x + cubic * x * x * x)));
}

inline float k_relu(float x, const EwParams&) {
  return x < 0 ? 0.0f : x;
}
inline float k_relu_fmax(float x, const EwParams&) {
  return std::fmax(x, 0.0f);
}
inline float k_leaky(float x, const EwParams& p) {
  return x > 0 ? x : x * f32(p.slope);
}
inline float k_leaky_select(float x, const EwParams& p) {
  return x * (x > 0 ? 1.0f : f32(p.slope));
}
inline float k_leaky_wrong_slope(float x, const EwParams&) {
  return x > 0 ? x : x * 0.1f;
}
inline float k_gelu(float x, const EwParams& p) {
  return p.tanh_approx ? gelu_tanh_f(x, 0.044715f) : gelu_erf_f(x);
}
inline float k_gelu_fast(float x, const EwParams& p) {
  if (p.tanh_approx) {
    // 0.5x(1 + tanh(y)) written as x * sigmoid(2y) with an exp2-based sigmoid (Triton kernels).
    const float y = 0.797884561f * (x + 0.044715f * x * x * x);
    return x * sigmoid_fast_f(2.0f * y);
  }
  return 0.5f * x * std::erfc(-x * 0.707106781f);
}
inline float k_gelu_const_0044(float x, const EwParams&) {
  return gelu_tanh_f(x, 0.044f);
}
inline float k_gelu_sigmoid_approx(float x, const EwParams&) {
  return x * sigmoid_f(1.702f * x);
}
inline float k_silu(float x, const EwParams&) {
  return x / (1.0f + std::exp(-x));
}
inline float k_silu_fast(float x, const EwParams&) {
  return x * sigmoid_fast_f(x);
}
inline float k_silu_overflow(float x, const EwParams&) {
  const float e = std::exp(x);
  return x * e / (1.0f + e);
}
inline float k_sigmoid(float x, const EwParams&) {
  return sigmoid_f(x);
}
inline float k_sigmoid_fast(float x, const EwParams&) {
  return sigmoid_fast_f(x);
}
inline float k_sigmoid_overflow(float x, const EwParams&) {
  const float e = std::exp(x);
  return e / (1.0f + e);
}
inline float k_sigmoid_tanh_half(float x, const EwParams&) {
  return 0.5f * std::tanh(x) + 0.5f;
}
inline float k_tanh(float x, const EwParams&) {
  return std::tanh(x);
}
inline float k_tanh_expm1(float x, const EwParams&) {
  const float e = std::expm1(2.0f * std::clamp(x, -10.0f, 10.0f));
  return e / (e + 2.0f);
}
inline float k_tanh_overflow(float x, const EwParams&) {
  const float e = std::exp(2.0f * x);
  return (e - 1.0f) / (e + 1.0f);
}
inline float k_elu(float x, const EwParams& p) {
  return x > 0 ? x : f32(p.alpha) * (std::exp(x) - 1.0f);
}
inline float k_elu_expm1(float x, const EwParams& p) {
  return x > 0 ? x : f32(p.alpha) * std::expm1(x);
}
inline float k_elu_no_minus_one(float x, const EwParams& p) {
  return x > 0 ? x : f32(p.alpha) * std::exp(x);
}
inline float k_softplus(float x, const EwParams& p) {
  const float bx = x * f32(p.beta);
  return bx > f32(p.threshold) ? x : std::log1p(std::exp(bx)) / f32(p.beta);
}
inline float k_softplus_stable(float x, const EwParams& p) {
  const float bx = x * f32(p.beta);
  if (bx > f32(p.threshold)) return x;
  return (std::max(bx, 0.0f) + std::log1p(std::exp(-std::fabs(bx)))) / f32(p.beta);
}
inline float k_softplus_naive(float x, const EwParams& p) {
  return std::log(1.0f + std::exp(x * f32(p.beta))) / f32(p.beta);
}
inline float k_exp(float x, const EwParams&) {
  return std::exp(x);
}
inline float k_exp_fast(float x, const EwParams&) {
  return std::exp2(x * k_log2e_f);
}
inline float k_exp2_no_scale(float x, const EwParams&) {
  return std::exp2(x);
}
inline float k_log(float x, const EwParams&) {
  return std::log(x);
}
inline float k_log_fast(float x, const EwParams&) {
  return std::log2(x) * k_ln2_f;
}
inline float k_log2_no_scale(float x, const EwParams&) {
  return std::log2(x);
}
inline float k_log_eps(float x, const EwParams&) {
  return std::log(x + 1e-6f);
}
inline float rsqrt_approx_f(float x) {
  return f32(1.0 / std::sqrt(static_cast<double>(x)));
}
inline float k_sqrt(float x, const EwParams&) {
  return std::sqrt(x);
}
inline float k_sqrt_via_rsqrt(float x, const EwParams&) {
  return 1.0f / rsqrt_approx_f(x);
}
inline float k_sqrt_eps(float x, const EwParams&) {
  return std::sqrt(x + 1e-6f);
}
inline float k_rsqrt(float x, const EwParams&) {
  return 1.0f / std::sqrt(x);
}
inline float k_rsqrt_approx(float x, const EwParams&) {
  return rsqrt_approx_f(x);
}
inline float k_rsqrt_eps(float x, const EwParams&) {
  return 1.0f / std::sqrt(x + 1e-6f);
}

}  // namespace ew
}  // namespace gpuemu::ops
