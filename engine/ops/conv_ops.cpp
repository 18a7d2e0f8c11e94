// conv1d [x[B,Cin,L], weight[Cout,Cin/groups,Kl], bias[Cout]] and conv2d [x[B,Cin,H,W],
// weight[Cout,Cin/groups,Kh,Kw], bias[Cout]]; stride, padding (zeros), dilation, groups as in
// torch.nn.functional.conv1d / conv2d (cross-correlation, no kernel flip).
// The reference is im2col + dgemm per (batch, group) in fp64. Error model: each output is a dot
// product of length R = Cin/groups·Kh·Kw, so c_acc = (|W_g|·|cols|)·sqrt(R) as for GEMM (sqrt(R)
// gains policy_weight() under a precision policy: cuDNN's TF32 convolutions), plus |bias|·sqrt(R):
// a kernel that starts its accumulator at the bias (PyTorch's CUDA depthwise kernel) rounds every
// one of the R partial sums at the bias's magnitude. With a bias, c_in = |conv before the bias|:
// PyTorch's cuDNN path stores the convolution in the input dtype and adds the bias in a second op
// (output.add_(bias)), as linear's unfused path does (docs/error-model.md).
// Padding takes no part (padded_taps_take_no_part): an infinite weight meeting a padded zero does
// not make the element NaN, and the NaN of kernels that multiply loaded zeros is the alternative.
// Controls: a direct fp32 loop, implicit GEMM over BLOCK_K=32 tiles, a channels-last reduction
// order with BLOCK_K=64, split-K. Buggy: the padding mishandled two ways, dilation ignored, the
// group's channel offset forgotten, the tail reduction tile dropped.
#include "ops/conv_im2col.hpp"
#include "ops/gemm_blas.hpp"
#include "ops/gemm_emulation.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <cmath>

namespace gpuemu::ops {
namespace {

using KernelOut = Result<std::vector<std::vector<double>>>;

Shape out_shape(const ConvGeom& g, int spatial_dims) {
  return spatial_dims == 2 ? Shape{g.B, g.Cout, g.Hout, g.Wout} : Shape{g.B, g.Cout, g.Wout};
}

// Padding takes no part, as masked keys take none in attention: out = Σ over the taps inside the
// input only. im2col's explicit zeros give the same sum except where a padded tap meets a non-finite
// weight (0·Inf = NaN): such an element is recomputed over its in-bounds taps (value and |W|·|x|),
// and a NaN is accepted as the alternative result, since kernels that load padding as 0 and
// multiply it (Triton's masked loads with other=0) return that NaN while implicit-padding ones
// (cuDNN, oneDNN) return the in-bounds sum.
void padded_taps_take_no_part(const ConvGeom& g, const double* x, const double* weight, RefVec& value,
                              RefVec& c_acc, std::vector<std::uint8_t>& alt) {
  const std::int64_t P = g.pixels(), R = g.red(), cog = g.cout_g(), cin_g = g.cin_g();
  for (std::int64_t b = 0; b < g.B; ++b)
    for (std::int64_t c = 0; c < g.Cout; ++c) {
      const std::int64_t grp = c / cog;
      const double* w = weight + c * R;  // [cin_g, Kh, Kw]
      for (std::int64_t oh = 0; oh < g.Hout; ++oh)
        for (std::int64_t ow = 0; ow < g.Wout; ++ow) {
          bool touched = false;  // a padded tap with a non-finite weight
          double v = 0.0, m = 0.0;
          for (std::int64_t ci = 0; ci < cin_g; ++ci)
            for (std::int64_t kh = 0; kh < g.Kh; ++kh)
              for (std::int64_t kw = 0; kw < g.Kw; ++kw) {
                const double wt = w[(ci * g.Kh + kh) * g.Kw + kw];
                const std::int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) {
                  touched |= !std::isfinite(wt);
                  continue;
                }
                const double xv = x[((b * g.Cin + grp * cin_g + ci) * g.H + ih) * g.W + iw];
                v += wt * xv;
                m += std::fabs(wt) * std::fabs(xv);
              }
          if (!touched) continue;
          const std::int64_t i = (b * g.Cout + c) * P + oh * g.Wout + ow;
          if (alt.empty()) alt.assign(value.size(), 0);
          value[i] = v;
          c_acc[i] = m;
          alt[i] = k_alt_nan;
        }
    }
}

Result<std::vector<RefOutput>> reference(const RefContext& ctx, int spatial_dims) {
  GPUEMU_TRY(ConvGeom g, conv_geometry(ctx, spatial_dims));
  const double* x = ctx.input("x").data.data();
  const double* weight = ctx.input("weight").data.data();
  const double* bias = ctx.has_input("bias") ? ctx.input("bias").data.data() : nullptr;
  const std::int64_t P = g.pixels(), R = g.red(), cog = g.cout_g();
  const auto n = static_cast<std::size_t>(g.B * g.Cout * P);
  RefVec value(n), c_acc(n), c_in;
  if (bias) c_in.resize(n);
  std::vector<double> cols(static_cast<std::size_t>(R * P));
  std::vector<RefVec> abs_w;
  for (std::int64_t grp = 0; grp < g.groups; ++grp)
    abs_w.push_back(abs_copy(weight + grp * cog * R, cog * R));
  // Under a precision policy whose operand rounding overflows (RefContext::operand_overflow), an
  // output whose filter or receptive field holds such an operand may be Inf or NaN, as in the gemm
  // references: `over` marks them (empty when no operand reaches the threshold).
  const double thr = ctx.operand_overflow;
  std::vector<std::uint8_t> over;
  std::vector<char> w_big;
  if (std::isfinite(thr)) {
    w_big.assign(static_cast<std::size_t>(g.Cout), 0);
    for (std::int64_t c = 0; c < g.Cout; ++c)
      for (std::int64_t r = 0; r < R; ++r)
        if (std::fabs(weight[c * R + r]) >= thr) w_big[c] = 1;
  }
  // Under a policy with an absolute operand error (RefContext::operand_floor), what each
  // subnormal operand adds to the bounds of the outputs it takes part in (subnormal_error), in
  // c_acc's units, added after the √R scaling below.
  std::vector<double> floor_part;
  if (ctx.operand_floor > 0.0) floor_part.assign(n, 0.0);
  for (std::int64_t b = 0; b < g.B; ++b)
    for (std::int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(x, g, b, grp, ReductionOrder::chw, Im2colBug::none, cols.data());
      const std::int64_t o = (b * g.Cout + grp * cog) * P;
      if (!w_big.empty()) {
        std::vector<char> x_big(static_cast<std::size_t>(P), 0);
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t px = 0; px < P; ++px)
            if (std::fabs(cols[r * P + px]) >= thr) x_big[px] = 1;
        for (std::int64_t co = 0; co < cog; ++co)
          for (std::int64_t px = 0; px < P; ++px)
            if (x_big[px] || w_big[grp * cog + co]) {
              if (over.empty()) over.assign(n, 0);
              over[o + co * P + px] = k_alt_any_nonfinite;
            }
      }
      dgemm_rm(false, false, cog, P, R, weight + grp * cog * R, R, cols.data(), P, value.data() + o,
               P);
      for (auto& c : cols) c = std::fabs(c);
      dgemm_rm(false, false, cog, P, R, abs_w[grp].data(), R, cols.data(), P, c_acc.data() + o, P);
      if (!floor_part.empty()) {  // cols holds |x| now; padding taps are 0 and add nothing
        const double wa = floor_weight_a(ctx), wb = floor_weight_b(ctx);
        double* fp = floor_part.data() + o;
        const double* w = weight + grp * cog * R;
        for (std::int64_t co = 0; co < cog; ++co)
          for (std::int64_t r = 0; r < R; ++r)
            if (const double s = subnormal_error(ctx, w[co * R + r]); s > 0.0)
              for (std::int64_t px = 0; px < P; ++px) fp[co * P + px] += wa * s * cols[r * P + px];
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t px = 0; px < P; ++px)
            if (const double s = subnormal_error(ctx, cols[r * P + px]); s > 0.0)
              for (std::int64_t co = 0; co < cog; ++co) fp[co * P + px] += wb * std::fabs(w[co * R + r]) * s;
      }
    }
  std::vector<std::uint8_t> alt;
  if (!all_finite(weight, g.Cout * R)) padded_taps_take_no_part(g, x, weight, value, c_acc, alt);
  if (!over.empty()) {
    if (alt.empty()) alt.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) alt[i] |= over[i];
  }
  const double root = sqrt_len(R) + policy_weight(ctx);  // a precision policy's operand rounding
  const double bias_root = sqrt_len(R);                    // the bias is never a rounded operand
  for (std::int64_t b = 0; b < g.B; ++b)
    for (std::int64_t c = 0; c < g.Cout; ++c)
      for (std::int64_t p = 0; p < P; ++p) {
        const auto i = static_cast<std::size_t>((b * g.Cout + c) * P + p);
        c_acc[i] *= root;
        if (!floor_part.empty()) c_acc[i] += floor_part[i];
        if (bias) {
          c_in[i] = std::fabs(value[i]);
          value[i] += bias[c];
          c_acc[i] += std::fabs(bias[c]) * bias_root;
        }
      }
  return single_output(ctx.output_dtype(), out_shape(g, spatial_dims), std::move(value),
                       std::move(c_acc), std::move(c_in), std::move(alt));
}

// Where a kernel adds the bias: to the fp32 accumulator after the reduction (fused), into the
// accumulator before it (PyTorch's CUDA depthwise kernel: acc = bias, then acc = fma(w, x, acc)), or
// to the convolution already stored in the output dtype, rounding again (cuDNN + output.add_(bias)).
enum class BiasAdd { last, first_fma, unfused };

struct ConvKernel {
  GemmEmulation gemm;
  ReductionOrder order = ReductionOrder::chw;
  Im2colBug bug = Im2colBug::none;
  BiasAdd bias = BiasAdd::last;
};

// One fp32 fma chain per output over (ci, kh, kw), started at the bias (BiasAdd::first_fma).
std::vector<double> bias_first_fma(const ConvGeom& g, const double* x, const double* weight,
                                   const double* bias, DType out_dtype) {
  const std::int64_t P = g.pixels(), R = g.red(), cog = g.cout_g();
  std::vector<double> out(static_cast<std::size_t>(g.B * g.Cout * P));
  std::vector<float> cols(static_cast<std::size_t>(R * P));
  for (std::int64_t grp = 0; grp < g.groups; ++grp) {
    const std::vector<float> w = to_f32(group_weight(weight, g, grp, ReductionOrder::chw));
    for (std::int64_t b = 0; b < g.B; ++b) {
      im2col(x, g, b, grp, ReductionOrder::chw, Im2colBug::none, cols.data());
      for (std::int64_t co = 0; co < cog; ++co) {
        const std::int64_t c = grp * cog + co;
        for (std::int64_t p = 0; p < P; ++p) {
          float acc = bias ? f32(bias[c]) : 0.0f;
          for (std::int64_t r = 0; r < R; ++r)
            acc = std::fma(w[static_cast<std::size_t>(co * R + r)],
                           cols[static_cast<std::size_t>(r * P + p)], acc);
          out[static_cast<std::size_t>((b * g.Cout + c) * P + p)] =
              round_to(out_dtype, static_cast<double>(acc));
        }
      }
    }
  }
  return out;
}

KernelFn emulated(int spatial_dims, ConvKernel k) {
  return [spatial_dims, k](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(ConvGeom g, conv_geometry(ctx, spatial_dims));
    const double* x = ctx.input("x").data.data();
    const double* weight = ctx.input("weight").data.data();
    const double* bias = ctx.has_input("bias") ? ctx.input("bias").data.data() : nullptr;
    const std::int64_t P = g.pixels(), R = g.red(), cog = g.cout_g();
    const DType out_dtype = ctx.output_dtype();
    if (k.bias == BiasAdd::first_fma)
      return std::vector<std::vector<double>>{bias_first_fma(g, x, weight, bias, out_dtype)};
    std::vector<double> out(static_cast<std::size_t>(g.B * g.Cout * P));
    std::vector<float> cols(static_cast<std::size_t>(R * P));
    for (std::int64_t grp = 0; grp < g.groups; ++grp) {
      const std::vector<float> w = to_f32(group_weight(weight, g, grp, k.order));
      for (std::int64_t b = 0; b < g.B; ++b) {
        im2col(x, g, b, grp, k.order, k.bug, cols.data());
        const std::vector<float> acc = emulate_gemm(w.data(), cols.data(), cog, R, P, k.gemm);
        for (std::int64_t co = 0; co < cog; ++co) {
          const std::int64_t c = grp * cog + co;
          for (std::int64_t p = 0; p < P; ++p) {
            float v = acc[co * P + p];
            if (bias && k.bias == BiasAdd::unfused)
              v = f32(round_to(out_dtype, static_cast<double>(v)));  // stored, then add_(bias)
            if (bias) v += f32(bias[c]);
            out[(b * g.Cout + c) * P + p] = round_to(out_dtype, static_cast<double>(v));
          }
        }
      }
    }
    return std::vector<std::vector<double>>{std::move(out)};
  };
}

ConvKernel kernel(std::int64_t block_k, std::int64_t split_k = 1,
                  ReductionOrder order = ReductionOrder::chw, Im2colBug bug = Im2colBug::none,
                  GemmBug gemm_bug = GemmBug::none) {
  ConvKernel k;
  k.gemm.block_k = block_k;
  k.gemm.split_k = split_k;
  k.gemm.bug = gemm_bug;
  k.order = order;
  k.bug = bug;
  return k;
}

ConvKernel with_bias(ConvKernel k, BiasAdd how) {
  k.bias = how;
  return k;
}

BuiltinOp make_op(const std::string& name, int sd) {
  BuiltinOp op;
  op.name = name;
  op.reference = [sd](const RefContext& ctx) { return reference(ctx, sd); };
  const auto chw = ReductionOrder::chw;
  op.controls = {
      {"direct_fp32", "one fp32 chain per output over (ci, kh, kw), bias added last",
       emulated(sd, kernel(0))},
      {"implicit_gemm_k32", "implicit GEMM, reduction (ci, kh, kw) in BLOCK_K=32 fp32 tiles",
       emulated(sd, kernel(32))},
      {"channels_last_k64", "implicit GEMM walking (kh, kw, ci) in BLOCK_K=64 fp32 tiles",
       emulated(sd, kernel(64, 1, ReductionOrder::hwc))},
      {"split_k4", "reduction split in 4 chunks of BLOCK_K=32 tiles, fp32 partials summed",
       emulated(sd, kernel(32, 4))},
      {"bias_first_fma",
       "PyTorch's CUDA depthwise kernel: the accumulator starts at the bias, one fp32 fma chain",
       emulated(sd, with_bias(kernel(0), BiasAdd::first_fma))},
      {"unfused_bias",
       "cuDNN's path: the convolution stored in the output dtype, then add_(bias) (two roundings)",
       emulated(sd, with_bias(kernel(32), BiasAdd::unfused))},
  };
  op.buggy = {
      {"pad_no_lower_check",
       "bounds mask `ih < H && iw < W` only: padded taps at negative "
       "indices read the neighbouring row or channel (padding > 0)",
       emulated(sd, kernel(32, 1, chw, Im2colBug::pad_no_lower_check))},
      {"pad_offset_missing",
       "input index oh·stride + k·dilation without subtracting the padding "
       "(padding > 0)",
       emulated(sd, kernel(32, 1, chw, Im2colBug::pad_offset_missing))},
      {"dilation_ignored", "taps at k instead of k·dilation (dilation > 1)",
       emulated(sd, kernel(32, 1, chw, Im2colBug::dilation_ignored))},
      {"group_offset_missing", "every group reads group 0's input channels (groups > 1)",
       emulated(sd, kernel(32, 1, chw, Im2colBug::group_offset_missing))},
      {"dropped_tail_k",
       "implicit GEMM over R // 32 full tiles: the partial reduction tile is "
       "lost (R = Cin/groups·kernel size not a multiple of 32)",
       emulated(sd, kernel(32, 1, chw, Im2colBug::none, GemmBug::dropped_tail_k))},
  };
  return op;
}

}  // namespace

void register_conv_ops(BuiltinRegistry& r) {
  r.add(make_op("conv1d", 1));
  r.add(make_op("conv2d", 2));
}

}  // namespace gpuemu::ops
