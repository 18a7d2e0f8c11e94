// silu_backward and swiglu_backward: the gradients of silu(x) and silu(gate) * up.
//   silu'(x) = s * (1 + x * (1 - s)),  s = sigmoid(x)
//   silu_backward:   grad_x    = g * silu'(x)
//   swiglu_backward: grad_gate = g * up * silu'(gate),  grad_up = g * silu(gate)
// fp64 references with the condition terms of their fp32 evaluation (docs/error-model.md),
// correct fp32 controls (PyTorch's order, and s + silu(x) * (1 - s)), and known-buggy kernels (the
// derivative without its second term, i.e. sigmoid alone; silu(x) in place of silu'(x);
// swiglu's grad_up computed from the gradient of the gate).
#include "core/parallel.hpp"
#include "ops/elementwise_math.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace gpuemu::ops {
namespace {

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
}

}  // namespace gpuemu::ops
