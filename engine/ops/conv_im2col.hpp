// Convolution geometry and im2col, shared by conv1d (seen as conv2d with H = 1) and conv2d: the
// fp64 reference multiplies each group's weight [Cout/g, Cin/g·Kh·Kw] by the column matrix
// [Cin/g·Kh·Kw, Hout·Wout] through dgemm; the emulated kernels run the same product as an
// implicit GEMM in fp32. The column builder also reproduces the indexing bugs of hand-written
// conv kernels (a missing lower-bound check, padding not subtracted, dilation or the group's
// channel offset forgotten).
#pragma once

#include "gpuemu/engine/op.hpp"

#include <cstdint>
#include <vector>

namespace gpuemu::ops {

struct ConvGeom {
  std::int64_t B = 0, Cin = 0, H = 1, W = 0, Cout = 0, Kh = 1, Kw = 0;
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  std::int64_t Hout = 0, Wout = 0;
  std::int64_t cin_g() const { return Cin / groups; }
  std::int64_t cout_g() const { return Cout / groups; }
  std::int64_t red() const { return cin_g() * Kh * Kw; }  // reduction length per output
  std::int64_t pixels() const { return Hout * Wout; }
};

// Reads x, weight (and bias) shapes and the stride / padding / dilation / groups attrs of conv1d
// (spatial_dims 1: x[B,Cin,L], weight[Cout,Cin/groups,Kl]) or conv2d (2: x[B,Cin,H,W],
// weight[Cout,Cin/groups,Kh,Kw]), checking them as PyTorch does.
Result<ConvGeom> conv_geometry(const RefContext& ctx, int spatial_dims);

// The order of the reduction index r: (ci, kh, kw) as weight is stored (NCHW kernels), or
// (kh, kw, ci) as channels-last kernels walk it.
enum class ReductionOrder { chw, hwc };

enum class Im2colBug {
  none,
  pad_no_lower_check,    // mask `ih < H && iw < W` only: negative indices read neighbouring memory
  pad_offset_missing,    // ih = oh·stride + kh·dilation, padding never subtracted
  dilation_ignored,      // ih = oh·stride - pad + kh
  group_offset_missing,  // every group reads the input channels of group 0
};

// cols[r, p] for batch b and group g ([red(), pixels()], row-major), in T (double or float).
template <typename T>
void im2col(const double* x, const ConvGeom& g, std::int64_t b, std::int64_t grp,
            ReductionOrder order, Im2colBug bug, T* cols);

// weight rows of group grp ([cout_g(), red()]) permuted to `order` (chw is weight's own layout).
std::vector<double> group_weight(const double* weight, const ConvGeom& g, std::int64_t grp,
                                 ReductionOrder order);

}  // namespace gpuemu::ops
