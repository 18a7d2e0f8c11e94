// silu_backward, swiglu_backward and gelu_backward: the gradients of silu(x), silu(gate) * up and
// gelu(x) (erf form or tanh approximation).
//   silu'(x) = s * (1 + x * (1 - s)),  s = sigmoid(x)
//   silu_backward:   grad_x    = g * silu'(x)
//   swiglu_backward: grad_gate = g * up * silu'(gate),  grad_up = g * silu(gate)
//   gelu_backward:   grad_x    = g * gelu'(x), gelu'(x) = Phi(x) + x * phi(x) (erf form), or
//                    0.5(1 + t) + 0.5x(1 - t^2) * k(1 + 3c x^2), t = tanh(k(x + c x^3)) (tanh form)
// fp64 references with the condition terms of their fp32 evaluation (docs/error-model.md),
// correct fp32 controls (PyTorch's order, and s + silu(x) * (1 - s)), and known-buggy kernels (the
// derivative without its second term, i.e. sigmoid alone; silu(x) in place of silu'(x);
// swiglu's grad_up computed from the gradient of the gate; gelu's derivative of the tanh form used
// for the erf form, without its x * phi(x) term, or without the inner derivative's 1 + 3c x^2).
#include "core/parallel.hpp"
#include "ops/elementwise_math.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

namespace gpuemu::ops {
namespace {

using ew::k_gelu_cubic;
using ew::k_gelu_erf_abs_error;
using ew::k_inv_sqrt_2pi;
using ew::k_sqrt1_2;
using ew::k_sqrt_2_over_pi;
using ew::RefPoint;
using ew::sigmoid64;
using ew::silu64;

// silu'(x) in fp64 and its fp32 evaluation's error, in units of u_fp32, per unit of |grad|:
// s = 1/(1 + exp(-x)) errs by s(1 - s)(1 + |x|) (exp's argument and result) + 2s (the add and
// the division); 1 - s carries that absolutely, plus its own rounding; x(1 - s) and 1 + x(1 - s)
// round once each; the product s * q once. Where exp(-x) overflows fp32 the derivative is
// indeterminate (overflow_guard), as silu's own value is.
struct SiluPrime {
  double value = 0.0, cond = 0.0;
};

SiluPrime silu_prime(double x) {
  const double s = sigmoid64(x);
  const double om = 1.0 - s;
  const double q = 1.0 + x * om;
  const double d = s * q;
  const double ds = s * om * (1.0 + std::fabs(x)) + 2.0 * s;  // |delta s| / u
  const double dq = std::fabs(x) * (ds + om) + std::fabs(x * om) + std::fabs(q);
  const double cond = ds * std::fabs(q) + s * dq + std::fabs(d);
  return {d, std::isfinite(cond) ? overflow_guard(cond, std::exp(-x)) : 0.0};
}

Result<std::vector<RefOutput>> silu_backward_reference(const RefContext& ctx) {
  const RefArg& g = ctx.input("grad_out");
  const RefArg& x = ctx.input("x");
  if (g.shape != x.shape)
    return make_error(ErrorCode::shape_mismatch, "silu_backward: grad_out " + shape_to_string(g.shape) +
                                                     " and x " + shape_to_string(x.shape) + " must have one shape");
  const std::int64_t n = x.numel();
  RefVec out = uninit_output(n), c_acc = uninit_output(n);
  parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const SiluPrime p = silu_prime(x.data[i]);
      const double v = g.data[i] * p.value;
      out[i] = v;
      // the derivative's error times |g|, and the product's rounding
      const double c = std::fabs(g.data[i]) * p.cond + std::fabs(v) +
                       std::fabs(g.data[i]) * k_fp32_min_normal;  // near underflow
      c_acc[i] = std::isfinite(v) && std::isfinite(c) ? overflow_guard(c, std::fabs(g.data[i])) : 0.0;
    }
  });
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc));
}

Result<std::vector<RefOutput>> swiglu_backward_reference(const RefContext& ctx) {
  const RefArg& g = ctx.input("grad_out");
  const RefArg& gate = ctx.input("gate");
  const RefArg& up = ctx.input("up");
  if (g.shape != gate.shape || up.shape != gate.shape)
    return make_error(ErrorCode::shape_mismatch,
                      "swiglu_backward: grad_out " + shape_to_string(g.shape) + ", gate " +
                          shape_to_string(gate.shape) + " and up " + shape_to_string(up.shape) +
                          " must have one shape");
  const std::int64_t n = gate.numel();
  RefVec dg = uninit_output(n), dg_c = uninit_output(n), du = uninit_output(n), du_c = uninit_output(n);
  parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const double gi = g.data[i], xi = gate.data[i], ui = up.data[i];
      const SiluPrime p = silu_prime(xi);
      const RefPoint f = silu64(xi);  // silu(gate) and its fp32 evaluation's term
      const double v_gate = gi * ui * p.value, v_up = gi * f.value;
      dg[i] = v_gate;
      du[i] = v_up;
      // grad_gate: g * up (one rounding, in either order), times the derivative's error
      const double cg = std::fabs(gi * ui) * (p.cond + std::fabs(p.value)) + std::fabs(v_gate) +
                        std::fabs(gi * ui) * k_fp32_min_normal;
      const double cu = std::fabs(gi) * f.c_acc + std::fabs(v_up) + std::fabs(gi) * k_fp32_min_normal;
      dg_c[i] = std::isfinite(v_gate) && std::isfinite(cg) ? overflow_guard(cg, std::fabs(gi * ui)) : 0.0;
      du_c[i] = std::isfinite(v_up) && std::isfinite(cu) ? cu : 0.0;
    }
  });
  std::vector<RefOutput> out;
  out.push_back(single_output(ctx.output_dtype(0), gate.shape, std::move(dg), std::move(dg_c)).front());
  out.push_back(single_output(ctx.output_dtype(1), gate.shape, std::move(du), std::move(du_c)).front());
  out[0].name = "grad_gate";
  out[1].name = "grad_up";
  return out;
}

// gelu'(x) in fp64 and its fp32 evaluation's error, in units of u_fp32, per unit of |grad| (the
// same shape as SiluPrime). erf and tanh are accurate to an absolute error (E = 8 u, as in gelu's
// forward), not a relative one.
//   erf form, torch's cdf + x * pdf with cdf = 0.5(1 + erf(x/sqrt2)), pdf = exp(-x^2/2)/sqrt(2 pi):
//     cdf errs by E/2, by its argument's two roundings (x/sqrt2 and the constant) times pdf * |x|,
//     and by 1 + erf's rounding; pdf relatively by x^2 (x*x's rounding through exp, doubled where
//     exp goes through exp2) and three roundings (exp, the constant, the product); x * pdf and the
//     sum round once each. The sum cancels near x = -0.75 and for x << 0 (cdf ~ -x * pdf).
//   tanh form, torch's 0.5(1 + t) + (0.5x * (1 - t^2)) * k(1 + 3c x^2), t = tanh(k(x + c x^3)):
//     c x^3 rounds four times, the add once, k * () twice; t errs by (1 - t^2) times that argument
//     error plus E; 1 - t*t cancels where |t| -> 1 (absolutely 2|t| dt, the square's and the
//     subtraction's roundings); 1 + 3c x^2 rounds four times, k * () twice; the products and the
//     sum once each. x*x overflows fp32 past 1.8e19 (0 * Inf in the second term): indeterminate.
// Underflow: pdf and 1 - t^2 are known to half a subnormal spacing, times |x| (k_fp32_min_normal).
struct GeluPrime {
  double value = 0.0, cond = 0.0;
  bool overflow = false;  // x*x may overflow fp32 (tanh form): the element is indeterminate, NaN accepted
};

GeluPrime gelu_prime(double x, bool tanh_approx) {
  const double ax = std::fabs(x), e_fn = k_gelu_erf_abs_error;
  const double underflow = (1.0 + ax) * k_fp32_min_normal;
  if (!tanh_approx) {
    const double cdf = 0.5 * std::erfc(-x * k_sqrt1_2);
    const double pdf = k_inv_sqrt_2pi * std::exp(-0.5 * x * x);
    const double xp = x * pdf, d = cdf + xp;
    const double e_cdf = 0.5 * e_fn + 2.0 * ax * pdf + cdf;
    const double e_pdf = x * x + 3.0;  // relative
    return {d, e_cdf + std::fabs(xp) * (e_pdf + 1.0) + std::fabs(d) + underflow};
  }
  const double c = k_gelu_cubic, k = k_sqrt_2_over_pi;
  const double x2 = x * x, cube = c * x2 * x, a = x + cube, inner = k * a;
  // 0.5(1 + t) and 1 - t^2 through sigmoids, without their cancellations in double
  const double t = std::tanh(inner), ld = sigmoid64(2.0 * inner);
  const double om = 4.0 * ld * sigmoid64(-2.0 * inner);
  const double id3 = 3.0 * c * x2, id = k * (1.0 + id3);
  const double rd = 0.5 * x * om * id, d = ld + rd;
  const double e_inner = k * (4.0 * std::fabs(cube) + std::fabs(a)) + 2.0 * std::fabs(inner);
  const double e_t = om * e_inner + e_fn;
  const double e_ld = 0.5 * (e_t + std::fabs(1.0 + t));
  const double e_om = 2.0 * std::fabs(t) * e_t + t * t + om;
  const double e_id = k * (4.0 * id3 + 1.0 + id3) + 2.0 * id;
  const double e_rd = 0.5 * ax * (e_om * id + om * e_id) + 2.0 * std::fabs(rd);
  const double cond = e_ld + e_rd + std::fabs(d) + underflow;
  return {d, std::isfinite(cond) ? cond : 0.0, std::isfinite(x2) && x2 >= k_fp32_max / 4};
}

Result<std::vector<RefOutput>> gelu_backward_reference(const RefContext& ctx) {
  const RefArg& g = ctx.input("grad_out");
  const RefArg& x = ctx.input("x");
  if (g.shape != x.shape)
    return make_error(ErrorCode::shape_mismatch, "gelu_backward: grad_out " + shape_to_string(g.shape) +
                                                     " and x " + shape_to_string(x.shape) + " must have one shape");
  const bool tanh_approx = ew::read_params(ctx).tanh_approx;
  const std::int64_t n = x.numel();
  RefVec out = uninit_output(n), c_acc = uninit_output(n);
  std::vector<std::uint8_t> alt(static_cast<std::size_t>(n), 0);
  std::atomic<bool> any_alt{false};
  parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const GeluPrime p = gelu_prime(x.data[i], tanh_approx);
      const double v = g.data[i] * p.value;
      out[i] = v;
      double c = std::fabs(g.data[i]) * p.cond + std::fabs(v);
      c = std::isfinite(v) && std::isfinite(c) ? c : 0.0;
      // An infinite g times a derivative whose fp32 evaluation may be 0 (underflowed, or
      // 1 - t^2 rounded to 0): Inf * 0 = NaN is as correct as the reference's +-Inf.
      const bool zero_ok = std::fabs(p.value) <= 0x1p-24 * p.cond;
      if (p.overflow || (std::isinf(g.data[i]) && zero_ok)) {
        if (p.overflow) c = std::isfinite(v) ? std::max(c, k_fp32_max) : 0.0;  // fp32 may form 0 * Inf
        alt[static_cast<std::size_t>(i)] = k_alt_nan;
        any_alt = true;
      }
      c_acc[i] = c;
    }
  });
  if (!any_alt) alt.clear();
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc), {}, std::move(alt));
}

enum class Variant {
  torch_order,    // g * (s * (1 + x * (1 - s))), s = 1/(1 + exp(-x)) in fp32
  sum_form,       // g * (s + silu(x) * (1 - s)), exp through exp2
  sigmoid_only,   // g * s: the derivative of x * sigmoid(x) without its x * s' term
  value_not_slope,  // g * silu(x): the activation where its derivative belongs
  up_from_gate,   // swiglu: grad_up = g * silu'(gate) (the gate's derivative where silu(gate) belongs)
};

float prime32(float x, Variant v) {
  if (v == Variant::sum_form) {
    const float s = 1.0f / (1.0f + std::exp2(-x * 1.44269504f));
    return s + (x * s) * (1.0f - s);
  }
  const float s = 1.0f / (1.0f + std::exp(-x));
  if (v == Variant::sigmoid_only) return s;
  if (v == Variant::value_not_slope) return x * s;
  return s * (1.0f + x * (1.0f - s));
}

KernelFn silu_backward_kernel(Variant v) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    const RefArg& g = ctx.input("grad_out");
    const RefArg& x = ctx.input("x");
    std::vector<double> out(static_cast<std::size_t>(x.numel()));
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<double>(f32(g.data[i]) * prime32(f32(x.data[i]), v));
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(), std::move(out))};
  };
}

KernelFn swiglu_backward_kernel(Variant v) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    const RefArg& g = ctx.input("grad_out");
    const RefArg& gate = ctx.input("gate");
    const RefArg& up = ctx.input("up");
    const auto n = static_cast<std::size_t>(gate.numel());
    std::vector<double> dg(n), du(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float gi = f32(g.data[i]), xi = f32(gate.data[i]), ui = f32(up.data[i]);
      const Variant pv = v == Variant::up_from_gate ? Variant::torch_order : v;
      const float prime = prime32(xi, pv);
      const float silu = xi / (1.0f + std::exp(-xi));
      dg[i] = static_cast<double>(gi * ui * prime);
      du[i] = static_cast<double>(v == Variant::up_from_gate ? gi * prime : gi * silu);
    }
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(0), std::move(dg)),
                                            round_all(ctx.output_dtype(1), std::move(du))};
  };
}

enum class GeluVariant {
  torch_order,   // torch's formulas (erf: cdf + x * pdf; tanh: left' + left * (1 - t^2) * inner') in fp32
  fast,          // erf through erfc and exp2; the tanh form as s + 2x s(1 - s) k(1 + 3c x^2), s = sigmoid(2y)
  tanh_for_erf,  // the tanh approximation's derivative whatever `approximate` says
  no_pdf_term,   // erf: cdf alone (the x * pdf term dropped); tanh: 0.5(1 + t) alone
  no_inner_chain,  // tanh: the inner derivative's 1 + 3c x^2 dropped (k alone)
};

float gelu_prime32(float x, bool tanh_approx, GeluVariant v) {
  constexpr float k_beta = 0.797884561f, k_kappa = 0.044715f;
  if (v == GeluVariant::tanh_for_erf) tanh_approx = true;
  if (v == GeluVariant::fast) {
    if (tanh_approx) {
      const float y = k_beta * (x + k_kappa * x * x * x);
      const float s = 1.0f / (1.0f + std::exp2(-2.0f * y * ew::k_log2e_f));
      return s + 2.0f * x * (s * (1.0f - s)) * (k_beta * (1.0f + 3.0f * k_kappa * x * x));
    }
    const float cdf = 0.5f * std::erfc(-x * 0.707106781f);
    const float pdf = 0.398942280f * std::exp2(-0.5f * x * x * ew::k_log2e_f);
    return cdf + x * pdf;
  }
  if (tanh_approx) {
    const float x_sq = x * x, x_cube = x_sq * x;
    const float t = std::tanh(k_beta * (x + k_kappa * x_cube));
    const float left = 0.5f * x, left_d = 0.5f * (1.0f + t);
    if (v == GeluVariant::no_pdf_term) return left_d;
    const float inner_d = v == GeluVariant::no_inner_chain ? k_beta : k_beta * (1.0f + 3.0f * k_kappa * x_sq);
    return left_d + left * (1.0f - t * t) * inner_d;
  }
  const float cdf = 0.5f * (1.0f + std::erf(x * 0.707106781f));
  if (v == GeluVariant::no_pdf_term) return cdf;
  const float pdf = 0.398942280f * std::exp(-0.5f * x * x);
  return cdf + x * pdf;
}

KernelFn gelu_backward_kernel(GeluVariant v) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    const RefArg& g = ctx.input("grad_out");
    const RefArg& x = ctx.input("x");
    const bool tanh_approx = ew::read_params(ctx).tanh_approx;
    std::vector<double> out(static_cast<std::size_t>(x.numel()));
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<double>(f32(g.data[i]) * gelu_prime32(f32(x.data[i]), tanh_approx, v));
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(), std::move(out))};
  };
}

}  // namespace

void register_elementwise_backward_ops(BuiltinRegistry& r) {
  BuiltinOp silu;
  silu.name = "silu_backward";
  silu.reference = silu_backward_reference;
  silu.controls = {
      {"fp32_torch_order", "g * s * (1 + x * (1 - s)), s = 1/(1 + exp(-x)), in fp32",
       silu_backward_kernel(Variant::torch_order)},
      {"fp32_sum_form", "g * (s + x*s * (1 - s)), exp through exp2, in fp32",
       silu_backward_kernel(Variant::sum_form)},
  };
  silu.buggy = {
      {"sigmoid_only", "g * sigmoid(x): the x * sigmoid'(x) term of the product rule dropped",
       silu_backward_kernel(Variant::sigmoid_only)},
      {"value_not_slope", "g * silu(x): the activation where its derivative belongs",
       silu_backward_kernel(Variant::value_not_slope)},
  };
  r.add(std::move(silu));

  BuiltinOp sw;
  sw.name = "swiglu_backward";
  sw.reference = swiglu_backward_reference;
  sw.controls = {
      {"fp32_torch_order", "grad_gate = g * up * s * (1 + gate * (1 - s)), grad_up = g * silu(gate), in fp32",
       swiglu_backward_kernel(Variant::torch_order)},
      {"fp32_sum_form", "the derivative as s + gate*s * (1 - s), exp through exp2, in fp32",
       swiglu_backward_kernel(Variant::sum_form)},
  };
  sw.buggy = {
      {"sigmoid_only", "grad_gate with sigmoid(gate) for silu'(gate)",
       swiglu_backward_kernel(Variant::sigmoid_only)},
      {"up_from_gate", "grad_up = g * silu'(gate) (the gate's derivative where silu(gate) belongs)",
       swiglu_backward_kernel(Variant::up_from_gate)},
  };
  r.add(std::move(sw));

  BuiltinOp gelu;
  gelu.name = "gelu_backward";
  gelu.reference = gelu_backward_reference;
  gelu.controls = {
      {"fp32_torch_order",
       "g * (cdf + x * pdf), or g * (0.5(1 + t) + 0.5x (1 - t^2) k(1 + 3c x^2)), torch's formulas in fp32",
       gelu_backward_kernel(GeluVariant::torch_order)},
      {"fp32_fast", "erf form through erfc and exp2; tanh form as s + 2x s(1 - s) k(1 + 3c x^2), s = sigmoid(2y)",
       gelu_backward_kernel(GeluVariant::fast)},
  };
  gelu.buggy = {
      {"tanh_for_erf", "the tanh approximation's derivative whatever `approximate` says",
       gelu_backward_kernel(GeluVariant::tanh_for_erf)},
      {"no_pdf_term", "g * Phi(x) (or g * 0.5(1 + t)): the x * phi(x) term of the product rule dropped",
       gelu_backward_kernel(GeluVariant::no_pdf_term)},
      {"no_inner_chain", "tanh form: the inner derivative k(1 + 3c x^2) taken as k (the chain rule stopped at x)",
       gelu_backward_kernel(GeluVariant::no_inner_chain)},
  };
  r.add(std::move(gelu));
}

}  // namespace gpuemu::ops
