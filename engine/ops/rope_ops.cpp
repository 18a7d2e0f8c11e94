// rope [x[B,L,H,D]; theta=10000, style="half"|"interleaved", offset=0]: rotary position
// embedding. Token l sits at position pos = offset + l; pair i (0 <= i < D/2) turns by
// phi = pos·theta^(-2i/D).
//  - style "half" (HF transformers' rotate_half, Llama/NeoX): the pair is (x[i], x[i + D/2]);
//    out[i] = x[i]·cos − x[i+D/2]·sin, out[i+D/2] = x[i+D/2]·cos + x[i]·sin.
//  - style "interleaved" (GPT-J, Meta's complex form, llama.cpp's normal mode): the pair is
//    (x[2i], x[2i+1]); out[2i] = x[2i]·cos − x[2i+1]·sin, out[2i+1] = x[2i+1]·cos + x[2i]·sin.
// The reference takes theta^(-2i/D), the angle, cos and sin in fp64.
//
// Error model, for the output element a whose pair partner is b:
//   c_acc = (|x_a| + |x_b|)·(2 + |phi|·(3 + |ln theta|·2i/D + i))
//   c_in  = |x_a·cos phi| + |x_b·sin phi|
// Kernels take the angle in fp32: the exponent 2i/D, theta^e, its reciprocal and pos·inv_freq
// each round (u_fp32 relative, the exponent's rounding amplified by ln theta), so the angle is off
// by about u_fp32·|phi|·(3 + |ln theta|·2i/D) radians; llama.cpp's running product
// theta_scale^i adds up to i more roundings (the +i, which costs little: |phi|·i peaks near
// i = D / (2 ln theta) where phi has already decayed). That moves the output by the angle error
// times the pair's magnitude: the error grows with the position, and fp32 rope at positions ~1e6
// is legitimately coarse. The 2 covers fp32 cos/sin and the fp32 multiply-add. c_in covers HF's
// module, which rounds cos and sin to x's dtype and does each multiply and the add in that dtype
// (and vLLM's cos/sin cache stored in the model dtype).
// rope_backward (grad_out -> grad_x, the inverse rotation) at the end, through rope's own parts.
#include "core/parallel.hpp"
#include "ops/gemm_emulation.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <cmath>

namespace gpuemu::ops {
namespace {

using KernelOut = Result<std::vector<std::vector<double>>>;

struct RopeProblem {
  std::int64_t B = 0, L = 0, H = 0, D = 0;
  double theta = 10000.0;
  bool interleaved = false;
  std::int64_t offset = 0;
  // Element index within a head of pair i's first and second member.
  std::int64_t first(std::int64_t i) const { return interleaved ? 2 * i : i; }
  std::int64_t second(std::int64_t i) const { return interleaved ? 2 * i + 1 : i + D / 2; }
};

Result<RopeProblem> problem_of(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  if (x.shape.size() != 4)
    return make_error(ErrorCode::shape_mismatch,
                      "rope needs x[B,L,H,D], got " + shape_to_string(x.shape));
  RopeProblem p;
  p.B = x.shape[0], p.L = x.shape[1], p.H = x.shape[2], p.D = x.shape[3];
  if (p.D % 2 != 0)
    return make_error(ErrorCode::shape_mismatch,
                      "rope needs an even head dim D, got " + std::to_string(p.D));
  p.theta = ctx.attr_float("theta");
  if (!(p.theta > 0.0) || !std::isfinite(p.theta))
    return make_error(ErrorCode::invalid_argument, "rope: theta must be positive and finite");
  const std::string style = ctx.attr_string("style");
  if (style != "half" && style != "interleaved")
    return make_error(ErrorCode::invalid_argument,
                      "rope: style must be \"half\" or \"interleaved\", got \"" + style + "\"");
  p.interleaved = style == "interleaved";
  p.offset = ctx.attr_int("offset");
  return p;
}

Result<std::vector<RefOutput>> rope_forward_reference(const RefContext& ctx) {
  GPUEMU_TRY(RopeProblem p, problem_of(ctx));
  const RefVec& x = ctx.input("x").data;
  const std::int64_t half = p.D / 2;
  // Per (l, i): cos, sin, and the angle's condition factor.
  std::vector<double> cs(static_cast<std::size_t>(p.L * half)), sn(cs.size()), ang(cs.size());
  const double log_theta = std::fabs(std::log(p.theta));
  for (std::int64_t l = 0; l < p.L; ++l)
    for (std::int64_t i = 0; i < half; ++i) {
      const double e = 2.0 * static_cast<double>(i) / static_cast<double>(p.D);
      const double phi = static_cast<double>(p.offset + l) * std::pow(p.theta, -e);
      cs[l * half + i] = std::cos(phi);
      sn[l * half + i] = std::sin(phi);
      ang[l * half + i] = 2.0 + std::fabs(phi) * (3.0 + log_theta * e + static_cast<double>(i));
    }
  RefVec out(x.size()), c_acc(x.size()), c_in(x.size());
  std::vector<std::uint8_t> alt(x.size(), 0);
  const double in_min_subnormal = dtype_info(ctx.input("x").dtype).min_subnormal;
  parallel_for(
      p.B * p.L * p.H,
      [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t l = (r / p.H) % p.L, base = r * p.D;
          for (std::int64_t i = 0; i < half; ++i) {
            const std::int64_t a = base + p.first(i), b = base + p.second(i);
            const double c = cs[l * half + i], s = sn[l * half + i];
            out[a] = x[a] * c - x[b] * s;
            out[b] = x[b] * c + x[a] * s;
            const double mag = (std::fabs(x[a]) + std::fabs(x[b])) * ang[l * half + i];
            c_acc[a] = c_acc[b] = mag;
            c_in[a] = std::fabs(x[a] * c) + std::fabs(x[b] * s);
            c_in[b] = std::fabs(x[b] * c) + std::fabs(x[a] * s);
            // An infinite input times a cos or sin whose sign fp32 cannot resolve (|cos| or |sin|
            // within the angle's error), or that a cos/sin cache in the input dtype rounds to 0:
            // any non-finite result is what a correct kernel may return.
            if (!finite(x[a]) || !finite(x[b])) {
              const double resolve = std::max(0x1.0p-23 * ang[l * half + i], in_min_subnormal);
              if (std::fabs(c) <= resolve || std::fabs(s) <= resolve)
                alt[a] = alt[b] = k_alt_any_nonfinite;
            }
          }
        }
      },
      256);
  return single_output(ctx.output_dtype(), ctx.input("x").shape, std::move(out), std::move(c_acc),
                       std::move(c_in), std::move(alt));
}

// How an emulated kernel takes its angles and does its arithmetic.
enum class RopeKind {
  fp32_hf,         // HF: inv_freq = 1 / theta^(arange(0, D, 2) / D) in fp32, angle pos·inv_freq
  hf_input_dtype,  // HF's module: cos/sin cast to x's dtype, each op rounded to x's dtype
  cache_lowp,      // vLLM: fp32 cos/sin cache stored in x's dtype, fp32 multiply-add
  ggml_iterative,  // llama.cpp: theta_i = pos·theta_scale^i by repeated fp32 multiplication
  // bugs
  style_swapped,      // the other style's pairing (rotates the wrong halves)
  rotate_half_sign,   // rotate_half as cat(x2, -x1): turns by -phi
  exponent_halved,    // inv_freq = theta^(-i/D) (arange(D/2) / D instead of arange(0, D, 2) / D)
  positions_in_bf16,  // positions and inv_freq held in bf16 (the module cast to bf16)
  offset_ignored,     // positions start at 0 whatever the offset
};

KernelFn emulated(RopeKind kind) {
  return [kind](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(RopeProblem p, problem_of(ctx));
    const RefVec& x = ctx.input("x").data;
    const DType dt = ctx.case_dtype, out_dtype = ctx.output_dtype();
    const std::int64_t half = p.D / 2;
    const bool pair_swap = kind == RopeKind::style_swapped;
    RopeProblem pairing = p;
    if (pair_swap) pairing.interleaved = !p.interleaved;
    // The fp32 angle table [L, D/2], as the kernel derives it.
    std::vector<float> cs(static_cast<std::size_t>(p.L * half)), sn(cs.size());
    const float theta = f32(p.theta);
    const float theta_scale = std::pow(theta, -2.0f / static_cast<float>(p.D));
    for (std::int64_t l = 0; l < p.L; ++l) {
      const std::int64_t pos = (kind == RopeKind::offset_ignored ? 0 : p.offset) + l;
      float theta_i = static_cast<float>(pos);  // llama.cpp's running angle
      for (std::int64_t i = 0; i < half; ++i) {
        float phi;
        if (kind == RopeKind::ggml_iterative) {
          phi = theta_i;
          theta_i *= theta_scale;
        } else {
          const float e = kind == RopeKind::exponent_halved
                              ? static_cast<float>(i) / static_cast<float>(p.D)
                              : static_cast<float>(2 * i) / static_cast<float>(p.D);
          float inv_freq = 1.0f / std::pow(theta, e);
          float t = static_cast<float>(pos);
          if (kind == RopeKind::positions_in_bf16) {
            inv_freq = round_lowp(DType::bfloat16, inv_freq);
            t = round_lowp(DType::bfloat16, t);
          }
          phi = t * inv_freq;
        }
        cs[l * half + i] = std::cos(phi);
        sn[l * half + i] = std::sin(phi);
      }
    }
    std::vector<double> out(x.size());
    parallel_for(
        p.B * p.L * p.H,
        [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r) {
            const std::int64_t l = (r / p.H) % p.L, base = r * p.D;
            for (std::int64_t i = 0; i < half; ++i) {
              const std::int64_t a = base + pairing.first(i), b = base + pairing.second(i);
              const float xa = f32(x[a]), xb = f32(x[b]);
              float c = cs[l * half + i], s = sn[l * half + i];
              if (kind == RopeKind::rotate_half_sign) s = -s;
              float oa, ob;
              if (kind ==
                  RopeKind::hf_input_dtype) {  // q*cos + rotate_half(q)*sin, all in x's dtype
                c = round_lowp(dt, c), s = round_lowp(dt, s);
                oa = round_lowp(dt, round_lowp(dt, xa * c) + round_lowp(dt, -xb * s));
                ob = round_lowp(dt, round_lowp(dt, xb * c) + round_lowp(dt, xa * s));
              } else {
                if (kind == RopeKind::cache_lowp) c = round_lowp(dt, c), s = round_lowp(dt, s);
                oa = xa * c - xb * s;
                ob = xb * c + xa * s;
              }
              out[a] = round_to(out_dtype, static_cast<double>(oa));
              out[b] = round_to(out_dtype, static_cast<double>(ob));
            }
          }
        },
        256);
    return std::vector<std::vector<double>>{std::move(out)};
  };
}

// ---- rope_backward: grad_x = R(-phi) grad_out, the inverse rotation ------------------------------
// With S negating the second member of every pair, R(-phi) g = S R(phi) S g exactly: a negation is
// exact, and a backward kernel's g_a cos + g_b sin is rope's g_a cos - (-g_b) sin bit for bit. So
// rope's reference (c_acc, c_in: symmetric in the signs), its controls and its bugs carry over
// through S; the classic bug is the forward rotation applied to the gradient.

// `values` with the second member of every pair negated, in place (x[B,L,H,D] row-major).
template <class Vec>
void negate_second(Vec& values, const RopeProblem& p) {
  const std::int64_t rows = p.B * p.L * p.H;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < p.D / 2; ++i) {
      auto& v = values[static_cast<std::size_t>(r * p.D + p.second(i))];
      v = -v;
    }
}

// ctx with x = S grad_out (and the problem it describes).
Result<std::pair<RefContext, RopeProblem>> backward_context(const RefContext& ctx) {
  RefContext c = ctx;
  c.inputs.clear();
  c.inputs["x"] = ctx.input("grad_out");
  GPUEMU_TRY(RopeProblem p, problem_of(c));
  negate_second(c.inputs["x"].data, p);
  return std::make_pair(std::move(c), p);
}

Result<std::vector<RefOutput>> backward_reference(const RefContext& ctx) {
  GPUEMU_TRY(auto cp, backward_context(ctx));
  GPUEMU_TRY(std::vector<RefOutput> out, rope_forward_reference(cp.first));
  RefOutput& o = out.front();
  negate_second(o.value, cp.second);
  if (!o.alt_nonfinite.empty()) {  // a negated element's accepted +Inf is -Inf and back
    std::vector<std::uint8_t> swapped = o.alt_nonfinite;
    for (auto& b : swapped)
      b = static_cast<std::uint8_t>((b & ~(k_alt_pos_inf | k_alt_neg_inf)) | ((b & k_alt_pos_inf) ? k_alt_neg_inf : 0) |
                                    ((b & k_alt_neg_inf) ? k_alt_pos_inf : 0));
    const RopeProblem& p = cp.second;
    for (std::int64_t r = 0; r < p.B * p.L * p.H; ++r)
      for (std::int64_t i = 0; i < p.D / 2; ++i) {
        const auto k = static_cast<std::size_t>(r * p.D + p.second(i));
        o.alt_nonfinite[k] = swapped[k];
      }
  }
  o.name = "grad_x";
  return out;
}

// A rope kernel as a backward kernel: S kernel(S grad_out); `forward` runs it on grad_out as is
// (the forward rotation applied to the gradient: a bug).
KernelFn backward_kernel(KernelFn rope_kernel, bool forward = false) {
  return [rope_kernel, forward](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(auto cp, backward_context(ctx));
    if (forward) cp.first.inputs["x"] = ctx.input("grad_out");
    GPUEMU_TRY(auto out, rope_kernel(cp.first));
    if (!forward) negate_second(out.front(), cp.second);
    return out;
  };
}

}  // namespace

void register_rope_ops(BuiltinRegistry& r) {
  BuiltinOp op;
  op.name = "rope";
  op.reference = rope_forward_reference;
  op.controls = {
      {"fp32_hf",
       "HF's angles in fp32 (inv_freq = 1 / theta^(arange(0, D, 2) / D)), fp32 "
       "rotation, output rounded once",
       emulated(RopeKind::fp32_hf)},
      {"hf_input_dtype",
       "HF's module: cos/sin cast to x's dtype, x·cos + rotate_half(x)·sin "
       "with every op rounded to x's dtype",
       emulated(RopeKind::hf_input_dtype)},
      {"cos_sin_cache_lowp", "vLLM: fp32 cos/sin cache stored in x's dtype, fp32 rotation",
       emulated(RopeKind::cache_lowp)},
      {"ggml_iterative_theta", "llama.cpp: angle pos·theta_scale^i by repeated fp32 products",
       emulated(RopeKind::ggml_iterative)},
  };
  op.buggy = {
      {"style_swapped", "pairs elements by the other style (rotates the wrong halves; D >= 4)",
       emulated(RopeKind::style_swapped)},
      {"rotate_half_sign", "rotate_half returns cat(x2, -x1): every pair turns by -phi (pos > 0)",
       emulated(RopeKind::rotate_half_sign)},
      {"theta_exponent_halved",
       "inv_freq = theta^(-i/D) instead of theta^(-2i/D) (D >= 4, pos > 0)",
       emulated(RopeKind::exponent_halved)},
      {"positions_in_bf16",
       "positions and inv_freq held in bf16 after the module was cast "
       "(positions past 256 collapse)",
       emulated(RopeKind::positions_in_bf16)},
      {"offset_ignored", "positions start at 0 whatever the offset (offset > 0)",
       emulated(RopeKind::offset_ignored)},
  };
  r.add(std::move(op));

  BuiltinOp bw;
  bw.name = "rope_backward";
  bw.reference = backward_reference;
  bw.controls = {
      {"fp32_hf", "HF's angles in fp32, the inverse rotation in fp32, output rounded once",
       backward_kernel(emulated(RopeKind::fp32_hf))},
      {"hf_input_dtype", "autograd through HF's module: cos/sin in x's dtype, every op rounded to it",
       backward_kernel(emulated(RopeKind::hf_input_dtype))},
      {"cos_sin_cache_lowp", "vLLM's cos/sin cache stored in the dtype, fp32 inverse rotation",
       backward_kernel(emulated(RopeKind::cache_lowp))},
      {"ggml_iterative_theta", "llama.cpp's angles by repeated fp32 products, the inverse rotation",
       backward_kernel(emulated(RopeKind::ggml_iterative))},
  };
  bw.buggy = {
      {"forward_rotation", "the forward rotation applied to grad_out: every pair turns by +phi, not -phi (pos > 0)",
       backward_kernel(emulated(RopeKind::fp32_hf), true)},
      {"style_swapped", "pairs elements by the other style (D >= 4)", backward_kernel(emulated(RopeKind::style_swapped))},
      {"theta_exponent_halved", "inv_freq = theta^(-i/D) instead of theta^(-2i/D) (D >= 4, pos > 0)",
       backward_kernel(emulated(RopeKind::exponent_halved))},
      {"offset_ignored", "positions start at 0 whatever the offset (offset > 0)",
       backward_kernel(emulated(RopeKind::offset_ignored))},
  };
  r.add(std::move(bw));
}

}  // namespace gpuemu::ops
