// rms_norm_backward and layer_norm_backward (below: its own header).
// rms_norm_backward: the gradients of rms_norm over the last dim, from grad_out (g), the forward's
// input x, its saved rstd (one per row) and the weight w:
//   x_hat = x * rstd,  wg = w * g,  c = mean_k(wg * x_hat)
//   grad_x      = rstd * (wg - x_hat * c)
//   grad_weight = sum over rows of g * x_hat
// fp64 references with the condition terms of their fp32 evaluation (docs/error-model.md), correct
// fp32 controls (the saved rstd; rstd recomputed from x, as kernels that save nothing do) and
// known-buggy kernels (grad_weight's row reduction dropping its last partial block of rows or
// accumulating in the input dtype; grad_x without the projection term).
#include "core/parallel.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gpuemu::ops {
namespace {

constexpr double k_no_lo = std::numeric_limits<double>::infinity();  // a running minimum's start

struct RmsBackwardProblem {
  std::int64_t rows = 0, n = 0;
  const RefArg *g = nullptr, *x = nullptr, *rstd = nullptr, *w = nullptr;
};

Result<RmsBackwardProblem> problem(const RefContext& ctx) {
  RmsBackwardProblem p;
  p.g = &ctx.input("grad_out");
  p.x = &ctx.input("x");
  p.rstd = &ctx.input("rstd");
  p.w = &ctx.input("weight");
  if (p.x->shape.size() != 2 || p.g->shape != p.x->shape)
    return make_error(ErrorCode::shape_mismatch,
                      "rms_norm_backward needs grad_out and x of one shape [R, N]: grad_out " +
                          shape_to_string(p.g->shape) + ", x " + shape_to_string(p.x->shape));
  p.rows = p.x->shape[0];
  p.n = p.x->shape[1];
  if (p.rstd->numel() != p.rows || p.w->numel() != p.n)
    return make_error(ErrorCode::shape_mismatch,
                      "rms_norm_backward: rstd " + shape_to_string(p.rstd->shape) + " must hold one value per row (" +
                          std::to_string(p.rows) + ") and weight " + shape_to_string(p.w->shape) +
                          " one per column (" + std::to_string(p.n) + ")");
  return p;
}

// The growth of an fp32 sum over `n` terms |t|, mean |t| = abs_sum / n, spread hi - lo.
double growth_of(std::int64_t n, double abs_sum, double lo, double hi) {
  if (n <= 0) return 0.0;
  return SumGrowth::growth(static_cast<double>(n), abs_sum / static_cast<double>(n), hi - lo);
}

Result<std::vector<RefOutput>> rms_backward_reference(const RefContext& ctx) {
  GPUEMU_TRY(RmsBackwardProblem p, problem(ctx));
  const std::int64_t R = p.rows, N = p.n;
  const auto total = static_cast<std::size_t>(R * N);
  RefVec gx(total), gx_c(total);
  const double* g = p.g->data.data();
  const double* x = p.x->data.data();
  const double* w = p.w->data.data();
  // Per row: the recomputation weight (G_sq / 2 + 2), which grad_weight's terms reuse.
  std::vector<double> rec(static_cast<std::size_t>(R), 0.0), row_sq(static_cast<std::size_t>(R), 0.0);
  parallel_rows(R, std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(N, 1)),
                [&](std::int64_t rb, std::int64_t re) {
    for (std::int64_t r = rb; r < re; ++r) {
      const double rs = p.rstd->data[static_cast<std::size_t>(r)];
      const double* gr = g + r * N;
      const double* xr = x + r * N;
      double s = 0.0, a = 0.0, lo = k_no_lo, hi = 0.0, sq = 0.0, sq_lo = k_no_lo, sq_hi = 0.0, wg_max = 0.0,
             wg_abs = 0.0, x_max = 0.0;
      for (std::int64_t k = 0; k < N; ++k) {
        const double t = w[k] * gr[k] * (xr[k] * rs);
        wg_max = std::max(wg_max, std::fabs(w[k] * gr[k]));
        wg_abs += std::fabs(w[k] * gr[k]);
        s += t;
        a += std::fabs(t);
        lo = std::min(lo, std::fabs(t));
        hi = std::max(hi, std::fabs(t));
        const double x2 = xr[k] * xr[k];
        x_max = std::max(x_max, std::fabs(xr[k]));
        sq += x2;
        sq_lo = std::min(sq_lo, x2);
        sq_hi = std::max(sq_hi, x2);
      }
      const double c = N > 0 ? s / static_cast<double>(N) : 0.0;
      const double G = growth_of(N, a, lo, hi) +
                       SumGrowth::absorbed(N, a, [&](std::int64_t k) { return w[k] * gr[k] * (xr[k] * rs); });
      // A kernel that recomputes rstd from x in fp32: its mean square errs by G_sq u, the square
      // root halves that, the division and the sqrt round once each.
      const double recompute = growth_of(N, sq, sq_lo, sq_hi) / 2.0 + 2.0;
      rec[static_cast<std::size_t>(r)] = recompute;
      // A kernel that recomputes rstd forms sum(x^2) in fp32: where that may overflow, its rstd
      // is 0 (or NaN) and the row's gradients, and its terms of grad_weight, are indeterminate.
      const double sq_guard = sq >= k_fp32_max / 4 || sq_hi >= k_fp32_max / 4 ? std::max(sq, sq_hi) : 0.0;
      row_sq[static_cast<std::size_t>(r)] = sq_guard;
      const double a_mean = N > 0 ? a / static_cast<double>(N) : 0.0;
      const double wg_mean = N > 0 ? wg_abs / static_cast<double>(N) : 0.0;
      for (std::int64_t k = 0; k < N; ++k) {
        const auto i = static_cast<std::size_t>(r * N + k);
        const double xh = xr[k] * rs, wg = w[k] * gr[k];
        const double v = rs * (wg - xh * c);
        gx[i] = v;
        const double axc = std::fabs(xh * c), awg = std::fabs(wg);
        const double cc = rs * (2.0 * awg + 3.0 * axc + std::fabs(xh) * (G + 3.0) * a_mean +
                                recompute * (awg + 3.0 * axc)) +
                          std::fabs(v) +
                          // near underflow each fp32 product and sum is known to half a subnormal
                          // spacing (u * FLT_MIN): x_hat's and w*g's (times rstd), c's terms (each
                          // x_hat_k's times |wg_k|, and the product's: times |x_hat| rstd), x_hat * c's
                          // (times rstd), the result's own
                          k_fp32_min_normal * (2.0 + rs * (2.0 + std::fabs(c) +
                                                           std::fabs(xh) * (2.0 + wg_mean))) +
                          // autograd's order: sum(w*g*x)'s subnormal terms (N of them) and
                          // -rstd^3 / 2 times it, each times 2|x| / N
                          k_fp32_min_normal * 2.0 * std::fabs(xr[k]) *
                              (1.0 / static_cast<double>(N) + rs * rs * rs);
        // fp32 intermediates of the row: the products and their sum (A, and A / rstd
        // unnormalised), every w * g (one that overflows makes the row's sum Inf or NaN),
        // rstd * w * g, and autograd's order rstd^3 * sum(w*g*x) (= rstd^2 A) times 2x / N.
        const double inter = std::max({a, rs > 0.0 ? a / rs : 0.0, wg_max, rs * awg, sq_guard,
                                       rs * rs * a * std::max(1.0, 2.0 * x_max)});
        gx_c[i] = std::isfinite(v) && std::isfinite(cc) ? overflow_guard(cc, inter) : 0.0;
      }
    }
  });
  // grad_weight: column sums over the rows, each term g * x_hat (x_hat's two roundings, the
  // product's, and a recomputed rstd's) plus the sum's growth over R.
  RefVec gw(static_cast<std::size_t>(N), 0.0), abs_sum(static_cast<std::size_t>(N), 0.0),
      weighted(static_cast<std::size_t>(N), 0.0), lo(static_cast<std::size_t>(N), k_no_lo),
      hi(static_cast<std::size_t>(N), 0.0);
  for (std::int64_t r = 0; r < R; ++r) {
    const double rs = p.rstd->data[static_cast<std::size_t>(r)];
    for (std::int64_t k = 0; k < N; ++k) {
      const double t = g[r * N + k] * (x[r * N + k] * rs), at = std::fabs(t);
      gw[k] += t;
      abs_sum[k] += at;
      // near underflow: x_hat's and the product's half subnormal spacings
      weighted[k] += at * (rec[static_cast<std::size_t>(r)] + 3.0) +
                     k_fp32_min_normal * (1.0 + std::fabs(g[r * N + k]));
      lo[k] = std::min(lo[k], at);
      hi[k] = std::max(hi[k], at);
    }
  }
  const double sq_guard = R > 0 ? *std::max_element(row_sq.begin(), row_sq.end()) : 0.0;
  RefVec gw_c(static_cast<std::size_t>(N));
  for (std::int64_t k = 0; k < N; ++k) {
    const double cc = weighted[k] + growth_of(R, abs_sum[k], lo[k], hi[k]) * abs_sum[k];
    gw_c[k] = std::isfinite(gw[k]) && std::isfinite(cc) ? overflow_guard(cc, std::max(abs_sum[k], sq_guard)) : 0.0;
  }
  std::vector<RefOutput> out;
  out.push_back(single_output(ctx.output_dtype(0), p.x->shape, std::move(gx), std::move(gx_c)).front());
  out.push_back(single_output(ctx.output_dtype(1), p.w->shape, std::move(gw), std::move(gw_c)).front());
  out[0].name = "grad_x";
  out[1].name = "grad_weight";
  return out;
}

enum class Variant {
  saved,                // fp32 with the saved rstd; grad_weight over blocks of 64 rows
  recompute,            // rstd recomputed from x in fp32 (tile sums); grad_x = rstd*wg - x*rstd^3*mean(wg*x)
  dweight_tail_dropped, // grad_weight's blocks of 64 rows: the last partial block is dropped
  dweight_lowp,         // grad_weight accumulated in the input dtype
  no_projection,        // grad_x = rstd * w * g (forgets - x_hat * mean(wg * x_hat))
};

constexpr std::int64_t k_row_block = 64;

KernelFn emulated(Variant variant) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    GPUEMU_TRY(RmsBackwardProblem p, problem(ctx));
    const std::int64_t R = p.rows, N = p.n;
    const DType dt = ctx.output_dtype(1);
    std::vector<double> gx(static_cast<std::size_t>(R * N));
    std::vector<float> rstd(static_cast<std::size_t>(R));
    const double eps = ctx.attr_float("eps");
    parallel_for(
        R,
        [&](std::int64_t rb, std::int64_t re) {
          for (std::int64_t r = rb; r < re; ++r) {
            float rs = f32(p.rstd->data[static_cast<std::size_t>(r)]);
            if (variant == Variant::recompute) {
              float ss = 0.0f;  // tile sums of 1024, as a GPU kernel's block reduction
              for (std::int64_t t = 0; t < N; t += 1024) {
                float tile = 0.0f;
                for (std::int64_t k = t; k < std::min(N, t + 1024); ++k) {
                  const float v = f32(p.x->data[static_cast<std::size_t>(r * N + k)]);
                  tile += v * v;
                }
                ss += tile;
              }
              rs = 1.0f / std::sqrt(ss / static_cast<float>(N) + static_cast<float>(eps));
            }
            rstd[static_cast<std::size_t>(r)] = rs;
            float s = 0.0f;
            for (std::int64_t t = 0; t < N; t += 1024) {
              float tile = 0.0f;
              for (std::int64_t k = t; k < std::min(N, t + 1024); ++k) {
                const auto i = static_cast<std::size_t>(r * N + k);
                const float wg = f32(p.w->data[static_cast<std::size_t>(k)]) * f32(p.g->data[i]);
                tile += variant == Variant::recompute ? wg * f32(p.x->data[i]) : wg * (f32(p.x->data[i]) * rs);
              }
              s += tile;
            }
            const float c = s / static_cast<float>(N);
            for (std::int64_t k = 0; k < N; ++k) {
              const auto i = static_cast<std::size_t>(r * N + k);
              const float xv = f32(p.x->data[i]);
              const float wg = f32(p.w->data[static_cast<std::size_t>(k)]) * f32(p.g->data[i]);
              float v = 0.0f;
              if (variant == Variant::no_projection) v = rs * wg;
              else if (variant == Variant::recompute) v = rs * wg - xv * (rs * rs * rs * c);
              else v = rs * (wg - (xv * rs) * c);
              gx[i] = static_cast<double>(v);
            }
          }
        },
        16);
    std::vector<double> gw(static_cast<std::size_t>(N), 0.0);
    for (std::int64_t k = 0; k < N; ++k) {
      float total = 0.0f;
      for (std::int64_t b = 0; b < R; b += k_row_block) {
        const std::int64_t e = std::min(R, b + k_row_block);
        if (variant == Variant::dweight_tail_dropped && e - b < k_row_block) break;
        float part = 0.0f;
        for (std::int64_t r = b; r < e; ++r) {
          const auto i = static_cast<std::size_t>(r * N + k);
          const float t = f32(p.g->data[i]) * (f32(p.x->data[i]) * rstd[static_cast<std::size_t>(r)]);
          if (variant == Variant::dweight_lowp)
            total = static_cast<float>(round_to(dt, static_cast<double>(total + t)));
          else
            part += t;
        }
        if (variant != Variant::dweight_lowp) total += part;
      }
      gw[static_cast<std::size_t>(k)] = static_cast<double>(total);
    }
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(0), std::move(gx)),
                                            round_all(dt, std::move(gw))};
  };
}


// ---- layer_norm_backward ------------------------------------------------------------------------
// The gradients of layer_norm over the last dim, from grad_out (g), the forward's input x, its
// saved mean and rstd (one each per row) and the weight w (absent: 1):
//   x_hat = (x - mean) * rstd,  wg = w * g,  c2 = mean_k(wg),  c1 = mean_k(wg * x_hat)
//   grad_x      = rstd * (wg - c2 - x_hat * c1)
//   grad_weight = sum over rows of g * x_hat,  grad_bias = sum over rows of g  (with a weight)
// Error model (docs/error-model.md): the fp32 row sums c2 and c1 (their growth), the products and
// subtractions; x_hat known only to the forward's precision, E = rstd_hi * G(x) * (|x| + mean|x|)
// (the fp32 mean's error amplified by rstd, as layer_norm's own model admits: a recomputed mean, the
// saved fp32 mean, or x_hat formed as the forward forms it, x * rstd - mean * rstd), carried by
// x_hat * c1 and by c1's terms (mean |wg| E); rstd recomputed in fp32 (the variance's sum growth,
// and a Welford variance's error near fp32's resolution of the offset, as the forward's rstd_hi);
// grad_weight's and grad_bias's column sums over the rows, G(R).

struct LnBackwardProblem {
  std::int64_t rows = 0, n = 0;
  const RefArg *g = nullptr, *x = nullptr, *mean = nullptr, *rstd = nullptr, *w = nullptr;
  double weight(std::int64_t k) const { return w ? w->data[static_cast<std::size_t>(k)] : 1.0; }
};

Result<LnBackwardProblem> ln_backward_problem(const RefContext& ctx) {
  LnBackwardProblem p;
  p.g = &ctx.input("grad_out");
  p.x = &ctx.input("x");
  p.mean = &ctx.input("mean");
  p.rstd = &ctx.input("rstd");
  p.w = ctx.has_input("weight") ? &ctx.input("weight") : nullptr;
  if (p.x->shape.size() != 2 || p.g->shape != p.x->shape)
    return make_error(ErrorCode::shape_mismatch,
                      "layer_norm_backward needs grad_out and x of one shape [R, N]: grad_out " +
                          shape_to_string(p.g->shape) + ", x " + shape_to_string(p.x->shape));
  p.rows = p.x->shape[0];
  p.n = p.x->shape[1];
  if (p.mean->numel() != p.rows || p.rstd->numel() != p.rows || (p.w && p.w->numel() != p.n))
    return make_error(ErrorCode::shape_mismatch,
                      "layer_norm_backward: mean " + shape_to_string(p.mean->shape) + " and rstd " +
                          shape_to_string(p.rstd->shape) + " must hold one value per row (" +
                          std::to_string(p.rows) + ")" +
                          (p.w ? ", weight " + shape_to_string(p.w->shape) + " one per column (" +
                                     std::to_string(p.n) + ")"
                               : std::string()));
  return p;
}

// The largest rstd a recomputed variance may give, as layer_norm's model bounds it (norm_ops.cpp):
// a Welford variance is known to within dvar = 2 u (max x - min x) max|x|; returns
// (rstd_hi - rstd) / rstd, rstd = 1 / sqrt(var + eps).
double ln_welford_excess(double dvar, double var, double eps) {
  const double b = var + eps;
  if (!(dvar > 0.0) || !std::isfinite(dvar) || !std::isfinite(b) || !(b > 0.0)) return 0.0;
  const double a = std::max(std::max(var - dvar, 0.0) + eps, 0x1p-149);
  return std::sqrt(b / a) - 1.0;
}

// The statistics of one row of x that the model reads (fp64).
struct LnRowStats {
  double mean_abs = 0.0, growth = 0.0, excess = 0.0, rec = 0.0, sum_guard = 0.0;
};

LnRowStats ln_row_stats(const double* xr, std::int64_t N, double eps) {
  LnRowStats st;
  if (N <= 0) return st;
  double s = 0.0, a = 0.0, lo = k_no_lo, hi = 0.0, x_lo = k_no_lo, x_hi = -k_no_lo;
  for (std::int64_t k = 0; k < N; ++k) {
    const double v = xr[k], av = std::fabs(v);
    s += v, a += av;
    lo = std::min(lo, av), hi = std::max(hi, av);
    x_lo = std::min(x_lo, v), x_hi = std::max(x_hi, v);
  }
  const double n = static_cast<double>(N);
  double mu = s / n, dev = 0.0, ssq = 0.0, d_lo = k_no_lo, d_hi = 0.0;
  for (std::int64_t k = 0; k < N; ++k) dev += xr[k] - mu;
  mu += dev / n;
  for (std::int64_t k = 0; k < N; ++k) {
    const double d = (xr[k] - mu) * (xr[k] - mu);
    ssq += d;
    d_lo = std::min(d_lo, d), d_hi = std::max(d_hi, d);
  }
  st.mean_abs = a / n;
  // A row of one element has an exact mean (x - mean is exactly 0); what a correct kernel can still
  // get wrong there is x_hat folded as x * rstd + (-rstd * mean) under an FMA: the rounding of
  // rstd * mean, u |mean| rstd (layer_norm's forward model counts that term alone there), so that
  // E = rstd_hi * |x| (growth 1/2 over |x| + mean|x| = 2|x|). PyTorch's CPU backward forms
  // grad_weight's x_hat that way (dy * (a * x + b), b = -a * mean).
  st.growth = N == 1 ? 0.5
                     : SumGrowth::growth(n, a / n, hi - lo) +
                           SumGrowth::absorbed(N, a, [xr](std::int64_t k) { return xr[k]; });
  st.excess = ln_welford_excess(2.0 * 0x1p-24 * (x_hi - x_lo) * hi, ssq / n, eps);
  // A two-pass rstd recomputed in fp32: the squares' sum grows by G_sq, the sqrt halves it; the
  // division, the sqrt and the reciprocal round once each.
  st.rec = (N == 1 ? 0.0 : growth_of(N, ssq, d_lo, d_hi)) / 2.0 + 3.0;
  // A kernel that recomputes the statistics sums |x| and (x - mean)^2 in fp32, and a folded x_hat
  // forms x * rstd (rstd up to 1/sqrt(eps) where the variance is lost): where those may overflow,
  // the row is indeterminate.
  const double x_rstd = hi / std::sqrt(std::max(ssq / n + eps, 0x1p-149));
  st.sum_guard = std::max({a, ssq, x_rstd}) >= k_fp32_max / 4 ? std::max({a, ssq, x_rstd}) : 0.0;
  return st;
}

Result<std::vector<RefOutput>> ln_backward_reference(const RefContext& ctx) {
  GPUEMU_TRY(LnBackwardProblem p, ln_backward_problem(ctx));
  const std::int64_t R = p.rows, N = p.n;
  const auto total = static_cast<std::size_t>(R * N);
  RefVec gx(total), gx_c(total);
  std::vector<std::uint8_t> gx_alt(total, 0);
  const double* g = p.g->data.data();
  const double* x = p.x->data.data();
  const double eps = ctx.attr_float("eps");
  const double u = 0x1p-24;
  // Per row: rstd's relative uncertainty (in units of u) and the x_hat error scale rstd_hi * G(x),
  // which grad_weight's terms reuse; the row's overflow guard.
  double w_abs_sum = 0.0;
  for (std::int64_t k = 0; k < N; ++k) w_abs_sum += std::fabs(p.weight(k));
  std::vector<double> lin(static_cast<std::size_t>(R), 0.0), amp(static_cast<std::size_t>(R), 0.0),
      mabs(static_cast<std::size_t>(R), 0.0), guard(static_cast<std::size_t>(R), 0.0);
  parallel_rows(R, std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(N, 1)),
                [&](std::int64_t rb, std::int64_t re) {
    std::vector<double> E(static_cast<std::size_t>(N));
    for (std::int64_t r = rb; r < re; ++r) {
      const auto ri = static_cast<std::size_t>(r);
      const double mu = p.mean->data[ri], rs = p.rstd->data[ri];
      const double* gr = g + r * N;
      const double* xr = x + r * N;
      const LnRowStats st = ln_row_stats(xr, N, eps);
      // rstd's relative error where a kernel recomputes it: e (a Welford variance's, exact
      // relative) plus rec u (the fp32 two-pass sums); lin and cub: (1 + e)^k - 1 for the rstd
      // and rstd^3 terms, in units of u.
      const double e = st.excess + u * st.rec;
      const double lin_r = e / u, cub_r = ((1.0 + e) * (1.0 + e) * (1.0 + e) - 1.0) / u;
      const double rs_hi = rs * (1.0 + e);
      const double a_r = rs_hi * st.growth;  // x_hat's error per |x|, in units of u
      lin[ri] = lin_r, amp[ri] = a_r, mabs[ri] = st.mean_abs;
      double s2 = 0.0, s1 = 0.0, a2 = 0.0, a1 = 0.0, lo2 = k_no_lo, hi2 = 0.0, lo1 = k_no_lo, hi1 = 0.0,
             me = 0.0, ds_abs = 0.0, ds_lo = k_no_lo, ds_hi = 0.0, wg_max = 0.0, w_max = 0.0, x_max = 0.0, g_max = 0.0,
             gx_max = 0.0;
      for (std::int64_t k = 0; k < N; ++k) {
        const double wg = p.weight(k) * gr[k], xh = (xr[k] - mu) * rs, t = wg * xh;
        const double awg = std::fabs(wg), at = std::fabs(t);
        s2 += wg, a2 += awg, lo2 = std::min(lo2, awg), hi2 = std::max(hi2, awg);
        s1 += t, a1 += at, lo1 = std::min(lo1, at), hi1 = std::max(hi1, at);
        // x_hat's error: the mean's (recomputed, or saved in fp32) amplified by rstd, x * rstd's
        // rounding (the forward's folded form); near underflow half a subnormal spacing, and the
        // mean's, amplified by rstd.
        E[static_cast<std::size_t>(k)] =
            a_r * (std::fabs(xr[k]) + st.mean_abs) + k_fp32_min_normal * (1.0 + rs_hi);
        me += awg * E[static_cast<std::size_t>(k)];
        ds_abs += awg * std::fabs(xr[k]);
        ds_lo = std::min(ds_lo, awg * std::fabs(xr[k])), ds_hi = std::max(ds_hi, awg * std::fabs(xr[k]));
        wg_max = std::max(wg_max, awg);
        w_max = std::max(w_max, std::fabs(p.weight(k)));
        x_max = std::max(x_max, std::fabs(xr[k]));
        g_max = std::max(g_max, std::fabs(gr[k]));
        gx_max = std::max(gx_max, std::fabs(gr[k] * xr[k]));
      }
      const double n = static_cast<double>(N);
      const double c2 = N > 0 ? s2 / n : 0.0, c1 = N > 0 ? s1 / n : 0.0;
      const double G2 = growth_of(N, a2, lo2, hi2) +
                        SumGrowth::absorbed(N, a2, [&](std::int64_t k) { return p.weight(k) * gr[k]; });
      const double G1 = growth_of(N, a1, lo1, hi1) + SumGrowth::absorbed(N, a1, [&](std::int64_t k) {
                          return p.weight(k) * gr[k] * ((xr[k] - mu) * rs);
                        });
      const double m2 = N > 0 ? a2 / n : 0.0, m1 = N > 0 ? a1 / n : 0.0, w_mean = N > 0 ? w_abs_sum / n : 0.0;
      // c1's error from x_hat's, mean(|wg| E); and c1 formed from uncentred sums, as PyTorch's CPU
      // kernel forms it ((sum(wg * x) - mean * sum(wg)) * rstd / N): those sums' own growth times
      // their magnitudes, which the mean's amplification by rstd carries as E does, with the
      // growth of the sum of wg (a constant gradient row: one-signed roundings, n / 2) or of
      // wg * x where that exceeds x's.
      const double G_ds = growth_of(N, ds_abs, ds_lo, ds_hi);
      const double unc = N > 0 ? rs_hi * (G_ds * ds_abs + G2 * a2 * std::fabs(mu)) / n : 0.0;
      const double mE = N > 0 ? std::max(me / n, unc) : 0.0;
      // fp32 intermediates of the row that may overflow where the result does not: every w * g,
      // and g * x, rstd * g (PyTorch's CPU kernel forms rstd * g * w left to right), their sums
      // (and sum(w*g*x) uncentred, sum(w*g) * mean, as that kernel forms them), rstd^3 times those,
      // (x - mean) * rstd^2 * c1; and a recomputing kernel's sums of x. PyTorch's CUDA kernel
      // (compute_gI) forms x - mean before it multiplies by rstd, and N * w (then times g: Inf, or
      // NaN where g is 0) and x_hat * sum(wg * x_hat) before it subtracts and scales by rstd / N:
      // with values near fp32's range those overflow where the result does not (2 of 100 boundary
      // cases on the H200 gave NaN for -0.093; an fp32 emulation of compute_gI gives the same NaN
      // here).
      const double rs3 = rs * rs * rs;
      const double xh_max = rs * (x_max + std::fabs(mu));
      const double inter = std::max({a2, ds_abs, a2 * std::fabs(mu), wg_max, n * wg_max, n * w_max, xh_max * a1, x_max + std::fabs(mu), rs * wg_max, rs * g_max, gx_max,
                                     a1 / std::max(rs, 1e-300), rs3 * std::max(ds_abs, a2 * std::fabs(mu)),
                                     rs * rs * m1 * 2.0 * x_max, st.sum_guard});
      guard[ri] = st.sum_guard;
      // An infinite w * g makes both c2 and c1 infinite: the reference's inf - inf may come out
      // +-Inf where another correct formulation (PyTorch's a*wg + b*x + c) gives NaN, or the
      // reverse: any non-finite result is as correct there.
      const bool inf_row = !std::isfinite(a2);
      for (std::int64_t k = 0; k < N; ++k) {
        const auto i = static_cast<std::size_t>(r * N + k);
        const double wg = p.weight(k) * gr[k], xh = (xr[k] - mu) * rs;
        const double v = rs * (wg - c2 - xh * c1);
        gx[i] = v;
        if (inf_row && !std::isfinite(v)) gx_alt[i] = k_alt_any_nonfinite;
        const double awg = std::fabs(wg), axh = std::fabs(xh), axc = std::fabs(xh * c1);
        const double cc =
            rs * (2.0 * awg + (G2 + 1.0) * m2 + 2.0 * std::fabs(c2) + axh * (G1 + 3.0) * m1 + 3.0 * axc +
                  E[static_cast<std::size_t>(k)] * std::fabs(c1) + axh * mE +
                  // second order: x_hat's error times c1's (a row of one element: x_hat's FMA
                  // residual squared, times rstd^3 |wg|, where rstd is 1/sqrt(eps))
                  u * E[static_cast<std::size_t>(k)] * mE) +
            rs * (lin_r * (awg + std::fabs(c2)) + cub_r * axc) + std::fabs(v) +
            // near underflow each fp32 product and sum is known to half a subnormal spacing:
            // w*g's, x_hat's, c1's and c2's terms, x_hat * c1, the result's own
            k_fp32_min_normal * (2.0 + rs * (3.0 + std::fabs(c1) + axh * (2.0 + m2))) +
            // ... and a product of g's formed before the weight's (rstd * g, g * x_hat: PyTorch's
            // rstd * g * w left to right), whose half subnormal spacing the weight amplifies
            k_fp32_min_normal * (std::fabs(p.weight(k)) * (1.0 + rs) + rs * (1.0 + axh) * w_mean);
        gx_c[i] = std::isfinite(v) && std::isfinite(cc) ? overflow_guard(cc, inter) : 0.0;
      }
    }
  });
  std::vector<RefOutput> out;
  out.push_back(
      single_output(ctx.output_dtype(0), p.x->shape, std::move(gx), std::move(gx_c), {}, std::move(gx_alt)).front());
  out[0].name = "grad_x";
  if (!p.w) return out;
  // grad_weight: column sums over the rows of g * x_hat (x_hat's error E, its roundings, a
  // recomputed rstd's) plus the sum's growth over R; grad_bias: column sums of g.
  RefVec gw(static_cast<std::size_t>(N), 0.0), gb(static_cast<std::size_t>(N), 0.0),
      w_abs(static_cast<std::size_t>(N), 0.0), w_weighted(static_cast<std::size_t>(N), 0.0),
      w_lo(static_cast<std::size_t>(N), k_no_lo), w_hi(static_cast<std::size_t>(N), 0.0),
      b_abs(static_cast<std::size_t>(N), 0.0), b_lo(static_cast<std::size_t>(N), k_no_lo),
      b_hi(static_cast<std::size_t>(N), 0.0);
  for (std::int64_t r = 0; r < R; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    const double mu = p.mean->data[ri], rs = p.rstd->data[ri];
    for (std::int64_t k = 0; k < N; ++k) {
      const auto i = static_cast<std::size_t>(r * N + k);
      const double gv = g[i], t = gv * ((x[i] - mu) * rs), at = std::fabs(t), ag = std::fabs(gv);
      gw[k] += t;
      w_abs[k] += at;
      w_weighted[k] += at * (lin[ri] + 3.0) +
                       ag * (amp[ri] * (std::fabs(x[i]) + mabs[ri]) + k_fp32_min_normal * (1.0 + rs)) +
                       k_fp32_min_normal;
      w_lo[k] = std::min(w_lo[k], at);
      w_hi[k] = std::max(w_hi[k], at);
      gb[k] += gv;
      b_abs[k] += ag;
      b_lo[k] = std::min(b_lo[k], ag);
      b_hi[k] = std::max(b_hi[k], ag);
    }
  }
  const double row_guard = R > 0 ? *std::max_element(guard.begin(), guard.end()) : 0.0;
  RefVec gw_c(static_cast<std::size_t>(N)), gb_c(static_cast<std::size_t>(N));
  // An infinite g times an x_hat that is 0 in exact arithmetic: NaN in the reference, +-Inf for a
  // kernel whose x_hat is off by its rounding (a folded a * x + b): any non-finite result is as
  // correct where the column's sum is non-finite.
  std::vector<std::uint8_t> gw_alt(static_cast<std::size_t>(N), 0);
  for (std::int64_t k = 0; k < N; ++k) {
    if (!std::isfinite(gw[k]) && !std::isfinite(b_abs[k])) gw_alt[static_cast<std::size_t>(k)] = k_alt_any_nonfinite;
    const auto col = [&](std::int64_t r) { return g[r * N + k]; };
    const double cw = w_weighted[k] + growth_of(R, w_abs[k], w_lo[k], w_hi[k]) * w_abs[k];
    gw_c[k] = std::isfinite(gw[k]) && std::isfinite(cw) ? overflow_guard(cw, std::max(w_abs[k], row_guard)) : 0.0;
    // grad_bias: sum's model over the column (its growth, repeated values' and absorbed terms')
    const double gbg = std::max(growth_of(R, b_abs[k], b_lo[k], b_hi[k]), SumGrowth::repeat_growth(R, col)) +
                       SumGrowth::absorbed(R, b_abs[k], col);
    const double cb = gbg * b_abs[k] + std::fabs(gb[k]);
    gb_c[k] = std::isfinite(gb[k]) && std::isfinite(cb) ? overflow_guard(cb, b_abs[k]) : 0.0;
  }
  out.push_back(
      single_output(ctx.output_dtype(1), p.w->shape, std::move(gw), std::move(gw_c), {}, std::move(gw_alt)).front());
  out.push_back(single_output(ctx.output_dtype(2), p.w->shape, std::move(gb), std::move(gb_c)).front());
  out[1].name = "grad_weight";
  out[2].name = "grad_bias";
  return out;
}

enum class LnVariant {
  saved,          // fp32 with the saved mean and rstd (Triton's tutorial); row sums over blocks of 64
  welford,        // mean and rstd recomputed from x in fp32 (Welford, as PyTorch's forward); 128-row blocks
  folded,         // PyTorch's CPU formulation: sum(wg*x) uncentred, grad_x = a*wg + b*x + c; one chain
  tail_dropped,   // grad_weight/grad_bias over blocks of 64 rows drop the last partial block
  lowp_acc,       // grad_weight/grad_bias accumulated in a 16-bit variable (the case dtype, bf16 for fp32)
  no_projection,  // grad_x forgets - x_hat * mean(wg * x_hat)
  no_mean_term,   // grad_x forgets - mean(wg)
};

KernelFn ln_backward_emulated(LnVariant variant) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    GPUEMU_TRY(LnBackwardProblem p, ln_backward_problem(ctx));
    const std::int64_t R = p.rows, N = p.n;
    std::vector<double> gx(static_cast<std::size_t>(R * N));
    std::vector<float> mean(static_cast<std::size_t>(R)), rstd(static_cast<std::size_t>(R));
    const float eps = f32(ctx.attr_float("eps"));
    auto wt = [&](std::int64_t k) { return p.w ? f32(p.w->data[static_cast<std::size_t>(k)]) : 1.0f; };
    parallel_for(
        R,
        [&](std::int64_t rb, std::int64_t re) {
          for (std::int64_t r = rb; r < re; ++r) {
            const auto ri = static_cast<std::size_t>(r);
            auto xv = [&](std::int64_t k) { return f32(p.x->data[static_cast<std::size_t>(r * N + k)]); };
            auto gv = [&](std::int64_t k) { return f32(p.g->data[static_cast<std::size_t>(r * N + k)]); };
            float mu = f32(p.mean->data[ri]), rs = f32(p.rstd->data[ri]);
            if (variant == LnVariant::welford) {
              float m = 0.0f, m2 = 0.0f;
              for (std::int64_t k = 0; k < N; ++k) {
                const float d = xv(k) - m;
                m += d / static_cast<float>(k + 1);
                m2 += d * (xv(k) - m);
              }
              mu = m;
              rs = 1.0f / std::sqrt(std::max(m2 / static_cast<float>(N), 0.0f) + eps);
            }
            mean[ri] = mu, rstd[ri] = rs;
            if (variant == LnVariant::folded) {
              // PyTorch's CPU kernel: ds = sum(wg * x), db = sum(wg) in fp32;
              // b = (db * mean - ds) * a^3 / N, c = -b * mean - db * a / N, dx = a * wg + b * x + c
              float ds = 0.0f, db = 0.0f;
              for (std::int64_t k = 0; k < N; ++k) {
                const float wg = wt(k) * gv(k);
                ds += wg * xv(k);
                db += wg;
              }
              const float scale = 1.0f / static_cast<float>(N);
              const float b = (db * mu - ds) * rs * rs * rs * scale;
              const float c = -b * mu - db * rs * scale;
              for (std::int64_t k = 0; k < N; ++k)
                gx[static_cast<std::size_t>(r * N + k)] = static_cast<double>(rs * (wt(k) * gv(k)) + b * xv(k) + c);
              continue;
            }
            float s1 = 0.0f, s2 = 0.0f;  // tile sums of 1024, as a GPU kernel's block reduction
            for (std::int64_t t = 0; t < N; t += 1024) {
              float t1 = 0.0f, t2 = 0.0f;
              for (std::int64_t k = t; k < std::min(N, t + 1024); ++k) {
                const float wg = wt(k) * gv(k), xh = (xv(k) - mu) * rs;
                t1 += xh * wg;
                t2 += wg;
              }
              s1 += t1, s2 += t2;
            }
            const float c1 = s1 / static_cast<float>(N), c2 = s2 / static_cast<float>(N);
            for (std::int64_t k = 0; k < N; ++k) {
              const float wg = wt(k) * gv(k), xh = (xv(k) - mu) * rs;
              float v = 0.0f;
              if (variant == LnVariant::no_projection) v = (wg - c2) * rs;
              else if (variant == LnVariant::no_mean_term) v = (wg - xh * c1) * rs;
              else v = (wg - (xh * c1 + c2)) * rs;
              gx[static_cast<std::size_t>(r * N + k)] = static_cast<double>(v);
            }
          }
        },
        16);
    std::vector<std::vector<double>> outs{round_all(ctx.output_dtype(0), std::move(gx))};
    if (!p.w) return outs;
    const std::int64_t block = variant == LnVariant::welford ? 128 : variant == LnVariant::folded ? 0 : 64;
    const std::int64_t bm = block > 0 ? block : std::max<std::int64_t>(R, 1);
    const std::int64_t rows = variant == LnVariant::tail_dropped ? R / bm * bm : R;
    const DType low = ctx.case_dtype == DType::float16 || ctx.case_dtype == DType::bfloat16 ? ctx.case_dtype
                                                                                              : DType::bfloat16;
    const bool lowp = variant == LnVariant::lowp_acc;
    std::vector<double> gw(static_cast<std::size_t>(N)), gb(static_cast<std::size_t>(N));
    for (std::int64_t k = 0; k < N; ++k) {
      float tw = 0.0f, tb = 0.0f;
      for (std::int64_t b = 0; b < rows; b += bm) {
        float pw = 0.0f, pb = 0.0f;
        for (std::int64_t r = b; r < std::min(rows, b + bm); ++r) {
          const auto i = static_cast<std::size_t>(r * N + k);
          const float gv = f32(p.g->data[i]);
          const float xh = (f32(p.x->data[i]) - mean[static_cast<std::size_t>(r)]) * rstd[static_cast<std::size_t>(r)];
          pw += gv * xh;
          pb += gv;
          if (lowp) pw = store_as(low, pw), pb = store_as(low, pb);
        }
        tw += pw, tb += pb;
        if (lowp) tw = store_as(low, tw), tb = store_as(low, tb);
      }
      gw[static_cast<std::size_t>(k)] = static_cast<double>(tw);
      gb[static_cast<std::size_t>(k)] = static_cast<double>(tb);
    }
    outs.push_back(round_all(ctx.output_dtype(1), std::move(gw)));
    outs.push_back(round_all(ctx.output_dtype(2), std::move(gb)));
    return outs;
  };
}

BuiltinOp make_layer_norm_backward_op() {
  BuiltinOp op;
  op.name = "layer_norm_backward";
  op.reference = ln_backward_reference;
  op.controls = {
      {"fp32_saved", "fp32 with the saved mean and rstd (Triton's layer_norm backward); grad_weight and "
                     "grad_bias over blocks of 64 rows",
       ln_backward_emulated(LnVariant::saved)},
      {"fp32_welford_recompute", "mean and rstd recomputed from x in fp32 (Welford, as PyTorch's forward); "
                                 "grad_weight and grad_bias over blocks of 128 rows",
       ln_backward_emulated(LnVariant::welford)},
      {"fp32_folded", "PyTorch's CPU formulation: sum(w*g*x) uncentred, grad_x = a*w*g + b*x + c; "
                      "grad_weight and grad_bias one fp32 chain over the rows",
       ln_backward_emulated(LnVariant::folded)},
  };
  op.buggy = {
      {"dweight_tail_dropped", "grad_weight and grad_bias summed over blocks of 64 rows drop the last partial block",
       ln_backward_emulated(LnVariant::tail_dropped)},
      {"dweight_lowp", "grad_weight and grad_bias accumulated in a 16-bit variable (the case dtype, bf16 for fp32)",
       ln_backward_emulated(LnVariant::lowp_acc)},
      {"no_projection", "grad_x = rstd * (w*g - mean(w*g)): the - x_hat * mean(w*g*x_hat) term forgotten",
       ln_backward_emulated(LnVariant::no_projection)},
      {"no_mean_term", "grad_x = rstd * (w*g - x_hat * mean(w*g*x_hat)): the - mean(w*g) term forgotten",
       ln_backward_emulated(LnVariant::no_mean_term)},
  };
  return op;
}

}  // namespace

void register_norm_backward_ops(BuiltinRegistry& r) {
  BuiltinOp op;
  op.name = "rms_norm_backward";
  op.reference = rms_backward_reference;
  op.controls = {
      {"fp32_saved", "fp32 with the saved rstd; grad_weight summed over blocks of 64 rows",
       emulated(Variant::saved)},
      {"fp32_recompute",
       "rstd recomputed from x in fp32; grad_x = rstd*w*g - x*rstd^3*mean(w*g*x)",
       emulated(Variant::recompute)},
  };
  op.buggy = {
      {"dweight_tail_dropped",
       "grad_weight summed over blocks of 64 rows drops the last partial block",
       emulated(Variant::dweight_tail_dropped)},
      {"dweight_lowp", "grad_weight accumulated in the input dtype (bf16/fp16)",
       emulated(Variant::dweight_lowp)},
      {"no_projection", "grad_x = rstd * w * g: the - x_hat * mean(w*g*x_hat) term forgotten",
       emulated(Variant::no_projection)},
  };
  r.add(std::move(op));
  r.add(make_layer_norm_backward_op());
}

}  // namespace gpuemu::ops
