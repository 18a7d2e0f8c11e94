#include "ops/conv_im2col.hpp"

namespace gpuemu::ops {
namespace {

Error conv_error(ErrorCode code, const std::string& msg) {
  return make_error(code, msg);
}

}  // namespace

Result<ConvGeom> conv_geometry(const RefContext& ctx, int spatial_dims) {
  const char* op = spatial_dims == 1 ? "conv1d" : "conv2d";
  const RefArg &x = ctx.input("x"), &w = ctx.input("weight");
  const auto rank = static_cast<std::size_t>(spatial_dims + 2);
  if (x.shape.size() != rank || w.shape.size() != rank)
    return conv_error(ErrorCode::shape_mismatch,
                      std::string(op) + " needs x and weight of rank " + std::to_string(rank) +
                          ", got " + shape_to_string(x.shape) + " and " + shape_to_string(w.shape));
  ConvGeom g;
  g.B = x.shape[0], g.Cin = x.shape[1], g.Cout = w.shape[0];
  if (spatial_dims == 2) {
    g.H = x.shape[2], g.W = x.shape[3], g.Kh = w.shape[2], g.Kw = w.shape[3];
  } else {
    g.H = 1, g.W = x.shape[2], g.Kh = 1, g.Kw = w.shape[2];
  }
  const auto n = static_cast<std::size_t>(spatial_dims);
  const auto stride = ctx.attr_ints("stride", n), padding = ctx.attr_ints("padding", n),
             dilation = ctx.attr_ints("dilation", n);
  g.groups = ctx.attr_int("groups");
  if (spatial_dims == 2) {
    g.sh = stride[0], g.sw = stride[1], g.ph = padding[0], g.pw = padding[1];
    g.dh = dilation[0], g.dw = dilation[1];
  } else {
    g.sw = stride[0], g.pw = padding[0], g.dw = dilation[0];
  }
  if (g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1 || g.ph < 0 || g.pw < 0 || g.groups < 1)
    return conv_error(ErrorCode::invalid_argument,
                      std::string(op) +
                          ": stride and dilation must be >= 1, padding >= 0, "
                          "groups >= 1");
  if (g.Cin % g.groups != 0 || g.Cout % g.groups != 0)
    return conv_error(ErrorCode::shape_mismatch,
                      std::string(op) + ": Cin (" + std::to_string(g.Cin) + ") and Cout (" +
                          std::to_string(g.Cout) + ") must be multiples of groups (" +
                          std::to_string(g.groups) + ")");
  if (w.shape[1] != g.cin_g())
    return conv_error(ErrorCode::shape_mismatch, std::string(op) + ": weight " +
                                                     shape_to_string(w.shape) +
                                                     " needs Cin / "
                                                     "groups = " +
                                                     std::to_string(g.cin_g()) + " in dim 1");
  const std::int64_t eff_h = g.dh * (g.Kh - 1) + 1, eff_w = g.dw * (g.Kw - 1) + 1;
  if (g.H + 2 * g.ph < eff_h || g.W + 2 * g.pw < eff_w)
    return conv_error(ErrorCode::shape_mismatch,
                      std::string(op) + ": the (dilated) kernel is larger than the padded input");
  g.Hout = (g.H + 2 * g.ph - eff_h) / g.sh + 1;
  g.Wout = (g.W + 2 * g.pw - eff_w) / g.sw + 1;
  if (ctx.has_input("bias") && ctx.input("bias").shape != Shape{g.Cout})
    return conv_error(ErrorCode::shape_mismatch, std::string(op) + ": bias " +
                                                     shape_to_string(ctx.input("bias").shape) +
                                                     " must be [" + std::to_string(g.Cout) + "]");
  return g;
}

template <typename T>
void im2col(const double* x, const ConvGeom& g, std::int64_t b, std::int64_t grp,
            ReductionOrder order, Im2colBug bug, T* cols) {
  const std::int64_t P = g.pixels(), cin_g = g.cin_g(), plane = g.H * g.W;
  const std::int64_t total = g.B * g.Cin * plane;
  const std::int64_t c0 = bug == Im2colBug::group_offset_missing ? 0 : grp * cin_g;
  const std::int64_t dh = bug == Im2colBug::dilation_ignored ? 1 : g.dh;
  const std::int64_t dw = bug == Im2colBug::dilation_ignored ? 1 : g.dw;
  const std::int64_t ph = bug == Im2colBug::pad_offset_missing ? 0 : g.ph;
  const std::int64_t pw = bug == Im2colBug::pad_offset_missing ? 0 : g.pw;
  for (std::int64_t ci = 0; ci < cin_g; ++ci)
    for (std::int64_t kh = 0; kh < g.Kh; ++kh)
      for (std::int64_t kw = 0; kw < g.Kw; ++kw) {
        const std::int64_t r = order == ReductionOrder::chw ? (ci * g.Kh + kh) * g.Kw + kw
                                                            : (kh * g.Kw + kw) * cin_g + ci;
        T* row = cols + r * P;
        const std::int64_t chan = (b * g.Cin + c0 + ci) * plane;
        for (std::int64_t oh = 0; oh < g.Hout; ++oh) {
          const std::int64_t ih = oh * g.sh - ph + kh * dh;
          for (std::int64_t ow = 0; ow < g.Wout; ++ow) {
            const std::int64_t iw = ow * g.sw - pw + kw * dw;
            double v = 0.0;
            if (bug == Im2colBug::pad_no_lower_check) {
              const std::int64_t flat = chan + ih * g.W + iw;
              if (ih < g.H && iw < g.W && flat >= 0 && flat < total) v = x[flat];
            } else if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) {
              v = x[chan + ih * g.W + iw];
            }
            row[oh * g.Wout + ow] = static_cast<T>(v);
          }
        }
      }
}

template void im2col<double>(const double*, const ConvGeom&, std::int64_t, std::int64_t,
                             ReductionOrder, Im2colBug, double*);
template void im2col<float>(const double*, const ConvGeom&, std::int64_t, std::int64_t,
                            ReductionOrder, Im2colBug, float*);

std::vector<double> group_weight(const double* weight, const ConvGeom& g, std::int64_t grp,
                                 ReductionOrder order) {
  const std::int64_t red = g.red(), cin_g = g.cin_g();
  std::vector<double> out(static_cast<std::size_t>(g.cout_g() * red));
  const double* w = weight + grp * g.cout_g() * red;
  for (std::int64_t co = 0; co < g.cout_g(); ++co)
    for (std::int64_t ci = 0; ci < cin_g; ++ci)
      for (std::int64_t kh = 0; kh < g.Kh; ++kh)
        for (std::int64_t kw = 0; kw < g.Kw; ++kw) {
          const std::int64_t src = (ci * g.Kh + kh) * g.Kw + kw;
          const std::int64_t dst =
              order == ReductionOrder::chw ? src : (kh * g.Kw + kw) * cin_g + ci;
          out[co * red + dst] = w[co * red + src];
        }
  return out;
}

}  // namespace gpuemu::ops
