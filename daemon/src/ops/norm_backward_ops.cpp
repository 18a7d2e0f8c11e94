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

Result<std::vector<RefOutput>> reference(const RefContext& ctx) {
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

}  // namespace

void register_norm_backward_ops(BuiltinRegistry& r) {
  BuiltinOp op;
  op.name = "rms_norm_backward";
  op.reference = reference;
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
}

}  // namespace gpuemu::ops
