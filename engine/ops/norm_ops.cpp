// Norms: layer_norm and rms_norm over the last dim, group_norm over x[B, C, S], batch_norm
// (inference) over x[B, C, S]. fp64 references with their condition terms, correct fp32 controls
// (two-pass and Welford statistics, x_hat stored in the input dtype before the affine as HF's
// LlamaRMSNorm does, cuDNN's fused scale/shift), and known-buggy kernels (one-pass
// E[x^2] - E[x]^2, eps outside the sqrt, accumulators in the input dtype, a mean divided by the
// padded block length, interleaved groups, channel indexing, training-mode statistics).
//
// Error model (docs/error-model.md), per element with sigma = sqrt(var + eps):
//   layer_norm, group_norm  c_acc = ((|x| + mean|x|) / sigma_lo * G + |x - mean| * (1 / sigma_lo
//                                   - 1 / sigma) / u) * |w| + |b|
//   rms_norm                c_acc = |x| / rms * |w| * G
//   (G = sqrt(len), or more for rows of near-equal terms: SumGrowth in lowp_emu.hpp; sigma_lo =
//   sqrt(var - dvar + eps), the least sigma a Welford variance may give, dvar = 2 u (max x -
//   min x) max|x|: see rows() below)
//   batch_norm              c_acc = (|x| + |running_mean|) * |w| / sigma + |b|
//   and c_in = |x_hat * w| (x_hat may pass through the input dtype before the weight product).
// The fp32 mean's error (u * mean|x| * sqrt(len)) amplified by 1/sigma is what a large offset over
// a tiny variance costs a correct two-pass kernel; a one-pass variance costs (mean/sigma)^2 more,
// which is how it is caught. Where an fp32 intermediate (sum|x|, sum of squares) can exceed
// float32's range, c_acc becomes that intermediate (overflow_guard): indeterminate. Near underflow,
// x_hat is only known to its dtype's subnormal spacing, which |w| amplifies: c_acc adds
// |w| * FLT_MIN (times 1 + rstd for the centred norms: the mean is known to no better either, and
// rstd amplifies it) and c_in adds |w| * the input dtype's smallest normal (half a subnormal
// spacing, in units of u). Where x_hat is within its fp32 error of 0, an infinite weight may give
// NaN or either infinity (alt_nonfinite).
#include "core/parallel.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"
#include "ops/vec_exp.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpuemu::ops {
namespace {

// Rows of contiguous `len` elements, each normalised by its own statistics, with a per-element
// affine index: layer_norm / rms_norm (rows of x[..., N], affine index k) and group_norm (rows are
// the groups of x[B, C, S], affine index = the channel of element k).
struct NormRows {
  std::int64_t rows = 0, len = 0;
  std::int64_t groups = 1, per_group_channels = 1, spatial = 1;  // group_norm; else 1, 1, 1
  bool grouped = false;
  std::int64_t affine_index(std::int64_t r, std::int64_t k) const {
    return grouped ? (r % groups) * per_group_channels + k / spatial : k;
  }
};

struct Affine {
  const RefArg* weight = nullptr;
  const RefArg* bias = nullptr;
  double w(std::int64_t i) const {
    return weight ? weight->data[static_cast<std::size_t>(i)] : 1.0;
  }
  double b(std::int64_t i) const { return bias ? bias->data[static_cast<std::size_t>(i)] : 0.0; }
};

Result<Affine> affine_of(const RefContext& ctx, std::int64_t size, bool with_bias) {
  Affine a;
  for (const char* name : {"weight", "bias"}) {
    if ((!with_bias && std::string(name) == "bias") || !ctx.has_input(name)) continue;
    const RefArg& t = ctx.input(name);
    if (t.numel() != size)
      return make_error(ErrorCode::shape_mismatch,
                        std::string(name) + " has " + std::to_string(t.numel()) +
                            " elements, expected " + std::to_string(size));
    (std::string(name) == "weight" ? a.weight : a.bias) = &t;
  }
  return a;
}

enum class NormKind { layer, rms, group };

Result<NormRows> norm_rows(const RefContext& ctx, NormKind kind) {
  const RefArg& x = ctx.input("x");
  NormRows nr;
  if (kind == NormKind::group) {
    if (x.shape.size() < 2)
      return make_error(ErrorCode::shape_mismatch, "group_norm needs x of rank >= 2");
    const std::int64_t groups = ctx.attr_int("num_groups"), channels = x.shape[1];
    if (groups < 1 || channels % groups != 0)
      return make_error(ErrorCode::invalid_argument, "num_groups " + std::to_string(groups) +
                                                         " does not divide the " +
                                                         std::to_string(channels) + " channels");
    nr.grouped = true;
    nr.groups = groups;
    nr.per_group_channels = channels / groups;
    nr.spatial = channels ? x.numel() / (x.shape[0] * channels) : 1;
    nr.rows = x.shape[0] * groups;
    nr.len = nr.per_group_channels * nr.spatial;
  } else {
    nr.len = x.shape.empty() ? 1 : x.shape.back();
    nr.rows = nr.len ? x.numel() / nr.len : 0;
  }
  return nr;
}

std::int64_t affine_size(const RefContext& ctx, const NormRows& nr) {
  return nr.grouped ? ctx.input("x").shape[1] : nr.len;
}

// Sums of four lanes, added pairwise at the end ((l0 + l1) + (l2 + l3)) + tail: the reference's
// reductions run four lanes at a time, so their rounding differs from a left-to-right sum by a
// few ulps (the corrected two-pass below removes the mean's rounding either way).
[[gnu::always_inline]] inline double lane_sum(vd4 v, double tail) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + tail;
}

inline double mean_abs_of(double abs_sum, double len) { return len > 0.0 ? abs_sum / len : 0.0; }

// rstd_hi = 1 / sqrt(var - dvar + eps), the largest rstd a variance known to within dvar may give
// (var - dvar clamped at 0, var + eps at the least fp32 subnormal), and (rstd_hi - rstd) / u, formed
// without cancelling: 1/sqrt(a) - 1/sqrt(b) = (b - a) / (sqrt(a) sqrt(b) (sqrt(a) + sqrt(b))).
struct RstdRange {
  double hi, excess;
};
inline RstdRange welford_rstd(double dvar, double var, double eps) {
  const double b = var + eps;
  if (!(dvar > 0.0) || !finite(dvar) || !finite(b) || !(b > 0.0)) return {1.0 / std::sqrt(b), 0.0};
  const double a = std::max(std::max(var - dvar, 0.0) + eps, 0x1p-149);
  const double drop = var - dvar > 0.0 ? dvar : b - a;
  const double sa = std::sqrt(a), sb = std::sqrt(b);
  return {1.0 / sa, drop / (sa * sb * (sa + sb)) * 0x1p24};
}

// One call of the norm reference: what every row needs, and the loop over rows [rb, re).
struct NormJob {
  const NormRows* nr = nullptr;
  const double* x = nullptr;
  const double* wv = nullptr;  // the affine weight and bias, expanded (1 and 0 where absent)
  const double* bv = nullptr;
  double* out = nullptr;
  double* c_acc = nullptr;
  double* c_in = nullptr;
  std::uint8_t* alt = nullptr;  // set when a weight is non-finite (see below)
  double eps = 0.0, in_min_normal = 0.0;
  bool centered = true;

  [[gnu::always_inline]] void rows(std::int64_t rb, std::int64_t re) const {
    const std::int64_t len_i = nr->len, n4 = len_i / 4 * 4;
    const double len = static_cast<double>(len_i);
    constexpr double k_inf = std::numeric_limits<double>::infinity();
    for (std::int64_t r = rb; r < re; ++r) {
      const double* row = x + r * len_i;
      // lo, hi: the least and greatest |x|; x_lo, x_hi: the least and greatest x.
      vd4 sum4 = splat4(0.0), abs4 = splat4(0.0), lo4 = splat4(k_inf), hi4 = splat4(0.0);
      vd4 xlo4 = splat4(k_inf), xhi4 = splat4(-k_inf);
      double sum_t = 0.0, abs_t = 0.0, lo = k_inf, hi = 0.0, x_lo = k_inf, x_hi = -k_inf;
      for (std::int64_t k = 0; k < n4; k += 4) {
        const vd4 v = load4(row + k), a = vabs(v);
        sum4 += v;
        abs4 += a;
        lo4 = select4(a < lo4, a, lo4);
        hi4 = select4(a > hi4, a, hi4);
        xlo4 = select4(v < xlo4, v, xlo4);
        xhi4 = select4(v > xhi4, v, xhi4);
      }
      for (std::int64_t k = n4; k < len_i; ++k) {
        sum_t += row[k], abs_t += std::fabs(row[k]);
        lo = std::min(lo, std::fabs(row[k]));
        hi = std::max(hi, std::fabs(row[k]));
        x_lo = std::min(x_lo, row[k]);
        x_hi = std::max(x_hi, row[k]);
      }
      for (int l = 0; l < 4; ++l) {
        lo = std::min(lo, lo4[l]), hi = std::max(hi, hi4[l]);
        x_lo = std::min(x_lo, xlo4[l]), x_hi = std::max(x_hi, xhi4[l]);
      }
      const double abs_sum = lane_sum(abs4, abs_t);
      double mean = centered ? lane_sum(sum4, sum_t) / len : 0.0;
      // Corrected two-pass (Chan, Golub, LeVeque): the deviations' own sum removes the first
      // pass's rounding from the mean, which a large offset over a tiny variance would otherwise
      // amplify by mean/sigma (at 1e5, 5e-10 relative error in x_hat).
      vd4 dev4 = splat4(0.0), ssq4 = splat4(0.0);
      double dev_t = 0.0, ssq_t = 0.0;
      for (std::int64_t k = 0; k < n4; k += 4) {
        const vd4 d = load4(row + k) - mean;
        dev4 += d;
        ssq4 += d * d;
      }
      for (std::int64_t k = n4; k < len_i; ++k) {
        const double d = row[k] - mean;
        dev_t += d;
        ssq_t += d * d;
      }
      const double dev = lane_sum(dev4, dev_t);
      double ssq = lane_sum(ssq4, ssq_t);
      if (centered && finite(dev)) {
        mean += dev / len;
        ssq -= dev * dev / len;
      }
      const double rstd = 1.0 / std::sqrt(ssq / len + eps);
      // The variance's own fp32 error, which rstd carries into every x_hat. A two-pass variance
      // errs by (the mean's error)^2, second order; a Welford variance (PyTorch's, Apex's) rounds
      // the running mean once per step (<= u * max|x|) and multiplies that by x - mean
      // (<= x_hi - x_lo), and as much again merging partial moments (Chan): up to
      // dvar = 2 u (x_hi - x_lo) max|x|, measured <= 0.92 u (x_hi - x_lo) max|x| for PyTorch's over
      // rows of 3 to 16384 at offsets up to 2e7. Negligible unless the variance is near fp32's
      // resolution of that offset; there, down to var - dvar, rstd may reach 1/sqrt(eps) (a row
      // like [20971534, 20971536, 20971536], var 0.89, gives PyTorch's fp32 layer_norm var 0).
      // rstd_hi, the largest rstd a correct kernel may compute, then bounds both the mean's error
      // amplified (amp) and |x - mean| * (rstd_hi - rstd) (d_rstd, in units of u).
      const RstdRange rr =
          welford_rstd(centered ? 2.0 * 0x1p-24 * (x_hi - x_lo) * hi : 0.0, ssq / len, eps);
      const double rstd_hi = rr.hi;
      double d_rstd = rr.excess;
      const double intermediate = std::max(abs_sum, ssq);
      // The fp32 mean is off by about u * mean|x| * sqrt(len) (mean|x| >= |mean|: mixed signs),
      // and never known better than half a subnormal spacing (u * FLT_MIN), which rstd amplifies
      // into x_hat, itself known to no better than that.
      const double mean_abs = centered ? abs_sum / len : 0.0;
      // The fp32 sum's growth: sqrt(len), or more over near-equal terms (SumGrowth): x for the
      // mean, x^2 for rms_norm's mean square.
      // Plus the terms within an ulp or two of the sum (SumGrowth::absorbed).
      // Or more over repeated terms (repeat_growth: a nearly constant row at an offset, a
      // low-precision row): x for the mean, |x| for the mean square.
      const double growth =
          centered ? std::max(SumGrowth::growth(len, abs_sum / len, hi - lo),
                              SumGrowth::repeat_growth(len_i, [row](std::int64_t k) { return row[k]; })) +
                         SumGrowth::absorbed(len_i, abs_sum, [row](std::int64_t k) { return row[k]; })
                   : std::max(SumGrowth::growth(len, ssq / len, hi * hi - lo * lo),
                              SumGrowth::repeat_growth(len_i, [row](std::int64_t k) { return std::fabs(row[k]); })) +
                         SumGrowth::absorbed(len_i, ssq,
                                             [row](std::int64_t k) { return row[k] * row[k]; });
      // A layer_norm row of one element has an exact mean (no addition, a division by 1;
      // Welford's first step is x / 1), so x - mean is exactly 0. What a correct kernel can still
      // get wrong there is PyTorch's folded affine, x * rstd + (-rstd * mean) contracted to an
      // FMA: the rounding of rstd * mean, at most u |mean| rstd (torch 1.13's fp32 layer_norm
      // gives 1.69 where b = 0 for x = 60000, w = 1.7). That one term replaces the mean's error,
      // counted twice for longer rows (|x| and mean|x|, each times rstd * G): halving an N = 1
      // bound that let an output of 0.25 where b = 0 pass at 1.3 (issue 21: float16, weight only,
      // fuzz seed 78, case 226). Not group_norm, whose folded affine is bounded below.
      // And downward: a two-pass variance over deviations from a mean off by delta is var + delta^2
      // (exactly: the deviations' sum is -N delta). Second order while delta << sigma, but a running
      // sum over a nearly constant row of repeats errs by up to u * mean|x| * G, G ~ N, which reaches
      // sigma: there the variance, and every x_hat, shrinks by sqrt(var / (var + delta^2)) (a
      // single-thread fp32 loop over 14,785 copies of -450.75 and one -442.75, float16: x_hat 121.6
      // came out 71.2, 2.6 times the first-order bound). rstd_lo = 1 / sqrt(var + delta^2 + eps);
      // the term |x - mean| * (rstd - rstd_lo) / u joins the upward one (the larger of the two).
      if (centered && len_i > 1) {
        const double delta = 0x1p-24 * mean_abs_of(abs_sum, len) * growth;
        const double b = ssq / len + eps, a = b + delta * delta;
        if (finite(a) && b > 0.0 && a > b) {
          const double sa = std::sqrt(a), sb = std::sqrt(b);
          d_rstd = std::max(d_rstd, (a - b) / (sa * sb * (sa + sb)) * 0x1p24);
        }
      }
      const bool exact_mean = centered && len_i == 1 && !nr->grouped;
      const double amp = exact_mean ? 0.0 : rstd_hi * growth,
                   c_base = (exact_mean ? mean_abs * rstd_hi : mean_abs * amp) +
                            k_fp32_min_normal * (centered && !exact_mean ? 1.0 + rstd_hi : 1.0);
      // Where an fp32 intermediate may overflow, the whole row is indeterminate.
      const double floor_c =
          intermediate >= k_fp32_max / 4 && finite(intermediate) ? intermediate : 0.0;
      double* o = out + r * len_i;
      double* ca = c_acc + r * len_i;
      double* ci = c_in + r * len_i;
      if (alt != nullptr)
        // Where x_hat is within its fp32 error of 0 (an exactly centred element: 0 in exact
        // arithmetic, ±tiny after a mean off by an ulp), an infinite weight gives NaN or either
        // infinity in a correct kernel.
        for (std::int64_t k = 0; k < len_i; ++k) {
          const double w = wv[nr->affine_index(r, k)];
          const double xh = (row[k] - mean) * rstd;
          if (!finite(w) &&
              std::fabs(xh) <= 0x1.0p-24 * (std::fabs(row[k]) * amp + c_base +
                                            std::fabs(row[k] - mean) * d_rstd))
            alt[r * len_i + k] = k_alt_any_nonfinite;
        }
      auto emit = [&](std::int64_t k, double y, double xh, double w, double b) {
        o[k] = y;
        const bool ok = finite(y);
        const double aw = std::fabs(w);
        ca[k] = ok ? std::max(aw * (std::fabs(row[k]) * amp + c_base +
                                    std::fabs(row[k] - mean) * d_rstd) +
                                  std::fabs(b),
                              floor_c)
                   : 0.0;
        ci[k] = ok ? std::fabs(xh * w) + aw * in_min_normal : 0.0;
      };
      if (!nr->grouped) {
        // emit() four lanes at a time, then the tail one by one.
        const vd4 zero = splat4(0.0), floor4 = splat4(floor_c);
        const double in_min = in_min_normal, mu = mean;  // not reloaded after every store
        elementwise(
            len_i,
            [&](std::int64_t k) __attribute__((always_inline)) {
              const double xh = (row[k] - mu) * rstd;
              emit(k, xh * wv[k] + bv[k], xh, wv[k], bv[k]);
            },
            [&](std::int64_t k) __attribute__((always_inline)) {
              const vd4 xv = load4(row + k), w = load4(wv + k), b = load4(bv + k);
              const vd4 xh = (xv - mu) * rstd;
              const vd4 y = xh * w + b;
              const auto ok = vabs(y) < k_inf;
              const vd4 aw = vabs(w);
              const vd4 a = aw * (vabs(xv) * amp + c_base + vabs(xv - mu) * d_rstd) + vabs(b);
              store4(o + k, y);
              store4(ca + k, select4(ok, select4(a < floor_c, floor4, a), zero));
              store4(ci + k, select4(ok, vabs(xh * w) + aw * in_min, zero));
            });
        continue;
      }
      // PyTorch's group_norm folds the affine into per-channel scale = rstd * w and
      // shift = b - scale * mean (an Inf weight then gives NaN, not +-Inf); layer_norm applies
      // w to x_hat. Both agree to 1e-16 relative on finite values.
      const std::int64_t chans = nr->per_group_channels, spatial = nr->spatial;
      const std::int64_t c0 = (r % nr->groups) * nr->per_group_channels;
      // Its fp32 intermediates rstd * w, x * scale and mean * scale (rstd up to rstd_hi) may
      // overflow where the result does not (a weight of 1.7e38 over a group of FLT_MIN and 0:
      // rstd 316, scale Inf, x * scale + shift = NaN where the result is 210): there the element
      // is indeterminate (overflow_guard), as batch_norm's folded alpha and beta are.
      for (std::int64_t j = 0; j < chans; ++j) {
        const double w = wv[c0 + j], b = bv[c0 + j];
        const double scale = rstd * w, shift = b - scale * mean;
        const double scale_hi = rstd_hi * std::fabs(w);
        for (std::int64_t k = j * spatial; k < (j + 1) * spatial; ++k) {
          emit(k, row[k] * scale + shift, (row[k] - mean) * rstd, w, b);
          // The direct form (x - mean) * rstd * w + b is as correct a kernel (PyTorch's CUDA
          // group_norm over a spatial size of 1 applies it elementwise): where it gives another
          // non-finite result, ±Inf for an Inf weight where the folded one gives NaN, that result
          // is accepted too (alt_nonfinite, as for batch_norm).
          if (alt != nullptr && !finite(w)) {
            const std::uint8_t direct = alt_bit_of((row[k] - mean) * rstd * w + b);
            if (direct != alt_bit_of(o[k])) alt[r * len_i + k] |= direct;
          }
          if (finite(o[k]))
            ca[k] = overflow_guard(
                ca[k], scale_hi * std::max({1.0, std::fabs(row[k]), std::fabs(mean)}));
        }
      }
    }
  }
};

// The same loops compiled for AVX2 and for the baseline; they give bit-identical results.
GPUEMU_TARGET_AVX2 void norm_rows_avx2(const NormJob& job, std::int64_t rb, std::int64_t re) {
  job.rows(rb, re);
}
void norm_rows_baseline(const NormJob& job, std::int64_t rb, std::int64_t re) {
  job.rows(rb, re);
}

Result<std::vector<RefOutput>> norm_reference(const RefContext& ctx, NormKind kind) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(NormRows nr, norm_rows(ctx, kind));
  const std::int64_t affine_n = affine_size(ctx, nr);
  GPUEMU_TRY(Affine af, affine_of(ctx, affine_n, kind != NormKind::rms));
  std::vector<double> wv(static_cast<std::size_t>(affine_n)),
      bv(static_cast<std::size_t>(affine_n));
  for (std::int64_t a = 0; a < affine_n; ++a)
    wv[static_cast<std::size_t>(a)] = af.w(a), bv[static_cast<std::size_t>(a)] = af.b(a);
  const std::int64_t n = x.numel();
  // Not zeroed: every element of the three is written below. The rows cover x (rows * len ==
  // numel), and emit() runs for each element of a row whatever its values (NaN, ±Inf rows
  // included): four at a time then the tail, or channel by channel over the group for group_norm.
  RefVec out = uninit_output(n), c_acc = uninit_output(n), c_in = uninit_output(n);
  NormJob job;
  job.nr = &nr;
  job.x = x.data.data();
  job.wv = wv.data();
  job.bv = bv.data();
  job.out = out.data();
  job.c_acc = c_acc.data();
  job.c_in = c_in.data();
  job.eps = ctx.attr_float("eps");
  job.in_min_normal = dtype_info(x.dtype).min_normal;
  job.centered = kind != NormKind::rms;
  std::vector<std::uint8_t> alt;
  if (job.centered && std::any_of(wv.begin(), wv.end(), [](double w) { return !finite(w); })) {
    alt.assign(static_cast<std::size_t>(n), 0);
    job.alt = alt.data();
  }
  const auto run = cpu_has_avx2() ? norm_rows_avx2 : norm_rows_baseline;
  parallel_rows(nr.rows, std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(nr.len, 1)),
                [&](std::int64_t rb, std::int64_t re) { run(job, rb, re); });
  if (kind == NormKind::rms) {
    // A row holding an infinity, or an x whose square fp32 cannot hold, has an infinite fp32 mean
    // square: the reference gives 0 (or its tiny value) for the other elements (x * rsqrt(inf) = 0).
    // A kernel that forms the mean square as a running mean (Welford's update, PyTorch's CUDA
    // rms_norm) meets inf - inf and returns NaN for the whole row: as correct a formulation, so NaN
    // is the alternative for every element of such a row.
    const double fp32_max = static_cast<double>(std::numeric_limits<float>::max());
    for (std::int64_t r = 0; r < nr.rows; ++r) {
      const double* xr = x.data.data() + r * nr.len;
      if (!std::any_of(xr, xr + nr.len, [&](double v) { return std::isinf(v) || v * v >= fp32_max; }))
        continue;
      if (alt.empty()) alt.assign(static_cast<std::size_t>(n), 0);
      for (std::int64_t k = 0; k < nr.len; ++k) alt[static_cast<std::size_t>(r * nr.len + k)] |= k_alt_nan;
    }
  }
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc),
                       std::move(c_in), std::move(alt));
}

// How an emulated norm kernel forms its statistics and normalises.
enum class Stats {
  two_pass,    // fp32: tiled mean, then tiled sum of squared deviations
  welford,     // fp32: 128 Welford lanes merged pairwise
  one_pass,    // bug: E[x^2] - E[x]^2 in fp32 (cancels under a large offset)
  lowp,        // bug: two-pass with the sums kept in the input dtype
  padded,      // bug: sums divided by BLOCK = next_power_of_2(len) instead of len
  interleaved  // bug (group_norm): channel c belongs to group c % G instead of c / (C/G)
};

struct NormVariant {
  Stats stats = Stats::two_pass;
  bool eps_outside = false;  // bug: 1 / (sqrt(var) + eps)
  bool round_xhat = false;   // control: x_hat stored in the input dtype before the affine
};

std::int64_t next_pow2(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Mean and 1/sigma of `len` floats in fp32, per the variant.
void row_stats(const float* x, std::int64_t len, bool centered, float eps, DType dt,
               const NormVariant& v, float& mean, float& rstd) {
  const float n = static_cast<float>(v.stats == Stats::padded ? next_pow2(len) : len);
  const RowSum how = v.stats == Stats::lowp ? RowSum::lowp : RowSum::tiled;
  float var = 0.0f;
  mean = 0.0f;
  if (v.stats == Stats::welford && centered) {
    const Moments m = welford_row(len, 128, [x](std::int64_t k) { return x[k]; });
    mean = m.mean;
    var = m.m2 / n;
  } else if (v.stats == Stats::welford) {
    // rms_norm's mean square as a running mean of x^2 (Welford's update), as PyTorch's CUDA
    // rms_norm does through its moments kernel: an infinite x^2 makes the row NaN (inf - inf).
    var = welford_row(len, 128, [x](std::int64_t k) { return x[k] * x[k]; }).mean;
  } else if (v.stats == Stats::one_pass && centered) {
    const float s = row_sum(len, RowSum::tiled, 1024, dt, [x](std::int64_t k) { return x[k]; });
    const float sq =
        row_sum(len, RowSum::tiled, 1024, dt, [x](std::int64_t k) { return x[k] * x[k]; });
    mean = s / n;
    var = sq / n - mean * mean;
  } else {
    if (centered) mean = row_sum(len, how, 1024, dt, [x](std::int64_t k) { return x[k]; }) / n;
    const float m = mean;
    var =
        row_sum(len, how, 1024, dt, [x, m](std::int64_t k) { return (x[k] - m) * (x[k] - m); }) / n;
  }
  rstd = v.eps_outside ? 1.0f / (std::sqrt(var) + eps) : 1.0f / std::sqrt(var + eps);
}

KernelFn norm_kernel(NormKind kind, NormVariant v) {
  return [kind, v](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& x = ctx.input("x");
    GPUEMU_TRY(NormRows nr, norm_rows(ctx, kind));
    GPUEMU_TRY(Affine af, affine_of(ctx, affine_size(ctx, nr), kind != NormKind::rms));
    const float eps = f32(ctx.attr_float("eps"));
    const DType od = ctx.output_dtype();
    const bool centered = kind != NormKind::rms;
    std::vector<double> out(x.data.size());
    parallel_for(
        nr.rows,
        [&](std::int64_t rb, std::int64_t re) {
          std::vector<float> row(static_cast<std::size_t>(nr.len));
          std::vector<std::size_t> where(static_cast<std::size_t>(nr.len));
          std::vector<std::int64_t> channel(static_cast<std::size_t>(nr.len));
          for (std::int64_t r = rb; r < re; ++r) {
            // The elements of this row (interleaved groups gather channels g, g+G, g+2G, ...).
            for (std::int64_t k = 0; k < nr.len; ++k) {
              std::int64_t flat = r * nr.len + k, a = nr.affine_index(r, k);
              if (v.stats == Stats::interleaved) {
                const std::int64_t b = r / nr.groups, g = r % nr.groups;
                const std::int64_t c = g + (k / nr.spatial) * nr.groups;
                flat = (b * nr.groups * nr.per_group_channels + c) * nr.spatial + k % nr.spatial;
                a = c;
              }
              where[static_cast<std::size_t>(k)] = static_cast<std::size_t>(flat);
              channel[static_cast<std::size_t>(k)] = a;
              row[static_cast<std::size_t>(k)] = f32(x.data[static_cast<std::size_t>(flat)]);
            }
            float mean = 0.0f, rstd = 0.0f;
            NormVariant sv = v;
            if (sv.stats == Stats::interleaved) sv.stats = Stats::two_pass;
            row_stats(row.data(), nr.len, centered, eps, x.dtype, sv, mean, rstd);
            for (std::int64_t k = 0; k < nr.len; ++k) {
              const auto ks = static_cast<std::size_t>(k);
              const float w = f32(af.w(channel[ks])), b = f32(af.b(channel[ks]));
              float y = 0.0f;
              if (kind == NormKind::group && !v.round_xhat) {
                // PyTorch's GroupNorm kernels: per-channel scale = rstd * w, shift = b - scale *
                // mean.
                const float scale = rstd * w;
                y = row[ks] * scale + (b - scale * mean);
              } else {
                float xh = (row[ks] - mean) * rstd;
                if (v.round_xhat) xh = store_as(x.dtype, xh);
                y = xh * w + b;
              }
              out[where[ks]] = round_to(od, static_cast<double>(y));
            }
          }
        },
        std::max<std::int64_t>(1, (1 << 13) / std::max<std::int64_t>(nr.len, 1)));
    return KernelOutputs{std::move(out)};
  };
}

BuiltinOp norm_op(const char* name, NormKind kind) {
  BuiltinOp op;
  op.name = name;
  op.reference = [kind](const RefContext& ctx) { return norm_reference(ctx, kind); };
  const bool centered = kind != NormKind::rms;
  const char* two_pass =
      kind == NormKind::rms ? "fp32 tiled mean of squares, x * rsqrt(ms + eps) * w"
      : kind == NormKind::group
          ? "fp32 tiled mean, then tiled sum of squared deviations; per-channel scale = "
            "rstd * w and shift = b - scale * mean (PyTorch's GroupNorm kernels)"
          : "fp32 tiled mean, then tiled sum of squared deviations, "
            "(x - mean) * rsqrt(var + eps) * w + b";
  op.controls.push_back({"fp32_two_pass", two_pass, norm_kernel(kind, {Stats::two_pass})});
  op.controls.push_back({"fp32_welford",
                         centered ? "128 Welford lanes in fp32 merged pairwise (Chan)"
                                  : "the mean square as a running mean of x^2 in 128 Welford "
                                    "lanes merged pairwise (PyTorch's CUDA rms_norm)",
                         norm_kernel(kind, {Stats::welford})});
  op.controls.push_back({"xhat_rounded",
                         "x_hat stored in the input dtype before the weight product (HF "
                         "LlamaRMSNorm's `weight * x.to(input_dtype)`)",
                         norm_kernel(kind, {Stats::two_pass, false, true})});
  if (centered)
    op.buggy.push_back({"one_pass_variance",
                        "var = E[x^2] - E[x]^2 in fp32: cancels under a large offset",
                        norm_kernel(kind, {Stats::one_pass})});
  op.buggy.push_back({"eps_outside_sqrt", "1 / (sqrt(var) + eps) instead of 1 / sqrt(var + eps)",
                      norm_kernel(kind, {Stats::two_pass, true})});
  if (kind == NormKind::group) {
    op.buggy.push_back({"interleaved_groups",
                        "channel c is put in group c % G instead of c / (C/G)",
                        norm_kernel(kind, {Stats::interleaved})});
  } else {
    op.buggy.push_back({"lowp_accumulator", "the statistics' sums are kept in the input dtype",
                        norm_kernel(kind, {Stats::lowp})});
    op.buggy.push_back({"padded_divisor", "sums divided by BLOCK = next_power_of_2(N) instead of N",
                        norm_kernel(kind, {Stats::padded})});
  }
  return op;
}

// ---- batch_norm (inference) --------------------------------------------------------------------

struct BnView {
  std::int64_t batch = 1, channels = 1, spatial = 1;
};

Result<BnView> bn_view(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  if (x.shape.size() < 2)
    return make_error(ErrorCode::shape_mismatch, "batch_norm needs x of rank >= 2");
  BnView v;
  v.batch = x.shape[0];
  v.channels = x.shape[1];
  v.spatial = v.batch * v.channels != 0 ? x.numel() / (v.batch * v.channels) : 1;
  for (const char* name : {"running_mean", "running_var"})
    if (ctx.input(name).numel() != v.channels)
      return make_error(ErrorCode::shape_mismatch, std::string(name) + " must have C elements");
  return v;
}

Result<std::vector<RefOutput>> batch_norm_reference(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(BnView v, bn_view(ctx));
  GPUEMU_TRY(Affine af, affine_of(ctx, v.channels, true));
  const RefArg& rm = ctx.input("running_mean");
  const RefArg& rv = ctx.input("running_var");
  const double eps = ctx.attr_float("eps");
  const double in_min_normal = dtype_info(x.dtype).min_normal;
  RefVec out(x.data.size()), c_acc(x.data.size()), c_in(x.data.size());
  std::vector<std::uint8_t> alt(x.data.size(), 0);
  parallel_for(
      v.batch * v.channels,
      [&](std::int64_t pb, std::int64_t pe) {
        for (std::int64_t p = pb; p < pe; ++p) {
          const auto c = static_cast<std::size_t>(p % v.channels);
          const double rstd = 1.0 / std::sqrt(rv.data[c] + eps);
          const double w = af.w(static_cast<std::int64_t>(c)),
                       b = af.b(static_cast<std::int64_t>(c));
          // PyTorch's formula (batch_norm_cpu_transform_input): alpha = w * invstd,
          // beta = b - mean * alpha, out = x * alpha + beta. It decides the special values (an Inf
          // weight gives NaN where (x - mean) * invstd * w would give Inf); for finite values it is
          // within 1e-16 * (|x * alpha| + |beta|) of the direct form, far inside the error model.
          // The direct form is as correct a kernel: where it gives another non-finite result,
          // that result is accepted too (alt_nonfinite).
          const double alpha = w * rstd, beta = b - rm.data[c] * alpha;
          for (std::int64_t s = 0; s < v.spatial; ++s) {
            const auto i = static_cast<std::size_t>(p * v.spatial + s);
            const double xh = (x.data[i] - rm.data[c]) * rstd;
            const double y = x.data[i] * alpha + beta;
            const double y_direct = xh * w + b;
            out[i] = y;
            if (alt_bit_of(y_direct) != alt_bit_of(y)) alt[i] = alt_bit_of(y_direct);
            const bool ok = finite(y);
            const double spread = std::fabs(x.data[i]) + std::fabs(rm.data[c]);  // x - mean in fp32
            // Underflowed fp32 intermediates ((x - mean) * rstd, or w * rstd in the fused form, or
            // w * (x - mean) in PyTorch's CUDA order) are off by up to half a subnormal spacing,
            // amplified by w, by x and mean, or by rstd.
            const double underflow = (std::fabs(w) + spread + rstd) * k_fp32_min_normal;
            // The fp32 intermediates of each form may overflow float32 where the result does
            // not: x - mean, x_hat, x_hat * w; w * rstd, x * alpha, mean * alpha; and w * (x - mean),
            // which PyTorch's CUDA kernel forms first (batch_norm_transform_input_kernel:
            // gamma * (x - mean) * invstd + beta, evaluated left to right).
            const double intermediate = std::max(
                {spread, std::fabs(xh), std::fabs(xh * w), std::fabs(alpha),
                 std::fabs(x.data[i] * alpha), std::fabs(rm.data[c] * alpha),
                 std::fabs((x.data[i] - rm.data[c]) * w)});
            c_acc[i] = ok ? overflow_guard(spread * std::fabs(w) * rstd + std::fabs(b) + underflow,
                                           intermediate)
                          : 0.0;
            c_in[i] = ok ? std::fabs(xh * w) + std::fabs(w) * in_min_normal : 0.0;
          }
        }
      },
      std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(v.spatial, 1)));
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc),
                       std::move(c_in), std::move(alt));
}

enum class BnVariant { direct, weight_first, scale_shift, eps_outside, channel_last_index, batch_stats };

KernelFn batch_norm_kernel(BnVariant variant) {
  return [variant](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& x = ctx.input("x");
    GPUEMU_TRY(BnView v, bn_view(ctx));
    GPUEMU_TRY(Affine af, affine_of(ctx, v.channels, true));
    const RefArg& rm = ctx.input("running_mean");
    const RefArg& rv = ctx.input("running_var");
    const float eps = f32(ctx.attr_float("eps"));
    const DType od = ctx.output_dtype();
    // Per-channel mean and variance; training-mode statistics for the batch_stats bug.
    std::vector<float> mean(static_cast<std::size_t>(v.channels)),
        var(static_cast<std::size_t>(v.channels));
    for (std::int64_t c = 0; c < v.channels; ++c) {
      const auto cs = static_cast<std::size_t>(c);
      mean[cs] = f32(rm.data[cs]);
      var[cs] = f32(rv.data[cs]);
      if (variant == BnVariant::batch_stats) {
        const std::int64_t n = v.batch * v.spatial;
        auto at = [&](std::int64_t k) {
          return f32(x.data[static_cast<std::size_t>(
              ((k / v.spatial) * v.channels + c) * v.spatial + k % v.spatial)]);
        };
        const float m = row_sum(n, RowSum::tiled, 1024, x.dtype, at) / static_cast<float>(n);
        mean[cs] = m;
        var[cs] = row_sum(n, RowSum::tiled, 1024, x.dtype,
                          [&](std::int64_t k) { return (at(k) - m) * (at(k) - m); }) /
                  static_cast<float>(n);
      }
    }
    std::vector<double> out(x.data.size());
    const std::int64_t n = x.numel();
    parallel_for(
        n,
        [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) {
            const std::int64_t c = variant == BnVariant::channel_last_index
                                       ? i % v.channels
                                       : (i / v.spatial) % v.channels;
            const auto cs = static_cast<std::size_t>(c);
            const float xv = f32(x.data[static_cast<std::size_t>(i)]);
            const float w = f32(af.w(c)), bias = f32(af.b(c));
            const float rstd = variant == BnVariant::eps_outside ? 1.0f / (std::sqrt(var[cs]) + eps)
                                                                 : 1.0f / std::sqrt(var[cs] + eps);
            float y = 0.0f;
            if (variant == BnVariant::scale_shift) {
              const float scale = w * rstd;
              const float shift = bias - mean[cs] * scale;
              y = xv * scale + shift;
            } else if (variant == BnVariant::weight_first) {
              y = w * (xv - mean[cs]) * rstd + bias;
            } else {
              y = (xv - mean[cs]) * rstd * w + bias;
            }
            out[static_cast<std::size_t>(i)] = round_to(od, static_cast<double>(y));
          }
        },
        1 << 14);
    return KernelOutputs{std::move(out)};
  };
}

BuiltinOp batch_norm_op() {
  BuiltinOp op;
  op.name = "batch_norm";
  op.reference = batch_norm_reference;
  op.controls = {
      {"fp32_direct", "(x - mean) * rsqrt(var + eps) * w + b in fp32",
       batch_norm_kernel(BnVariant::direct)},
      {"fp32_weight_first",
       "PyTorch's CUDA kernel: w * (x - mean) * (1 / sqrt(var + eps)) + b in fp32, left to right",
       batch_norm_kernel(BnVariant::weight_first)},
      {"fp32_scale_shift",
       "cuDNN inference: scale = w * rsqrt(var + eps), shift = b - mean * scale, "
       "x * scale + shift",
       batch_norm_kernel(BnVariant::scale_shift)},
  };
  op.buggy = {
      {"eps_outside_sqrt", "1 / (sqrt(var) + eps)", batch_norm_kernel(BnVariant::eps_outside)},
      {"channel_last_index",
       "channel taken as flat_index % C (channels-last indexing of an NCHW tensor)",
       batch_norm_kernel(BnVariant::channel_last_index)},
      {"batch_statistics",
       "normalises with the batch's own mean and variance (training mode) instead of the "
       "running statistics",
       batch_norm_kernel(BnVariant::batch_stats)},
  };
  return op;
}

}  // namespace

void register_norm_ops(BuiltinRegistry& r) {
  r.add(norm_op("layer_norm", NormKind::layer));
  r.add(norm_op("rms_norm", NormKind::rms));
  r.add(norm_op("group_norm", NormKind::group));
  r.add(batch_norm_op());
}

}  // namespace gpuemu::ops
