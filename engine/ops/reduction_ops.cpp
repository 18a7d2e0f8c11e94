// Reductions over `dim`: sum, mean, amax, argmax, logsumexp, l2norm (F.normalize) and the scan
// cumsum. fp64 references with their condition terms, correct fp32 controls (tiled tree sums,
// one-thread-per-row loops, two-stage splits, blocked scans), and known-buggy kernels (a running
// sum kept in the input dtype, a dropped tail tile, `acc =` instead of `acc +=`, ...).
//
// Error model (docs/error-model.md), per output element:
//   sum        c_acc = sum|x| * G                   mean  c_acc = sum|x| / len * G,
//                                                         c_in = |mean| (the sum held in the input dtype)
//   amax       exact (c = 0)                        argmax  judged by index (see below)
//   logsumexp  c_acc = |max| + |lse| + G(exp) + sum_k p_k |x_k - max|
//   l2norm     c_acc = |out| * (2 + max(sqrt(len), G(x^2) / 2))   cumsum  c_acc = running sum|x| * G(prefix)
// where G = sqrt(len) for varied terms, and grows to (len + 1)/2 for near-equal ones (SumGrowth,
// lowp_emu.hpp: the correlated rounding of a running sum).
// Every term is 0 where the reference is not finite; where an fp32 intermediate (sum|x|, sum x^2)
// can exceed float32's range the term becomes that intermediate (overflow_guard).
//
// argmax ties: the reference returns torch's index (the first maximal one; a NaN counts as the
// maximum, so a row holding NaN gives the index of its first NaN). The verdict must accept any
// index j whose value is tied with the maximum within input rounding, x[j] >= max - u_in*|max|,
// and for a row holding NaN any index of a NaN; an index outside [0, len) always fails.
#include "core/parallel.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <cmath>
#include <limits>

namespace gpuemu::ops {
namespace {

// Row r (= o * inner + i) of a tensor seen as [outer, len, inner]: a pointer to its `len` values,
// contiguous (gathered into `buf` when the reduced dim is not the innermost).
const double* row_of(const RefVec& x, const ReduceGeom& g, std::int64_t r,
                     std::vector<double>& buf) {
  if (g.inner == 1) return x.data() + r * g.len;
  buf.resize(static_cast<std::size_t>(g.len));
  const std::int64_t o = r / g.inner, i = r % g.inner;
  for (std::int64_t k = 0; k < g.len; ++k)
    buf[static_cast<std::size_t>(k)] = x[static_cast<std::size_t>(g.index(o, k, i))];
  return buf.data();
}

std::size_t flat(const ReduceGeom& g, std::int64_t r, std::int64_t k) {
  return static_cast<std::size_t>(g.index(r / g.inner, k, r % g.inner));
}

struct ReduceArgs {
  ReduceGeom g;
  Shape out_shape;
};

Result<ReduceArgs> reduce_args(const RefContext& ctx, const RefArg& x, bool same_shape) {
  ReduceArgs a;
  const std::int64_t dim = ctx.attr_int("dim");
  GPUEMU_TRY(a.g, reduce_geom(x.shape, dim));
  if (!x.shape.empty() && a.g.len == 0)
    return make_error(ErrorCode::invalid_argument, "cannot reduce over an empty dim");
  const bool keepdim = ctx.attrs.contains("keepdim") && ctx.attr_bool("keepdim");
  a.out_shape = same_shape ? x.shape : reduced_shape(x.shape, dim, keepdim);
  return a;
}

// Runs fn(r, row) over every row, in parallel, with a per-thread gather buffer.
template <class Fn>
void for_rows(const RefVec& x, const ReduceGeom& g, Fn&& fn) {
  const std::int64_t rows = g.outer * g.inner;
  parallel_for(
      rows,
      [&](std::int64_t b, std::int64_t e) {
        std::vector<double> buf;
        for (std::int64_t r = b; r < e; ++r) fn(r, row_of(x, g, r, buf));
      },
      std::max<std::int64_t>(1, (1 << 15) / std::max<std::int64_t>(g.len, 1)));
}

// ---- references --------------------------------------------------------------------------------

enum class Red { sum, mean, amax, argmax, logsumexp };

Result<std::vector<RefOutput>> reduce_reference(const RefContext& ctx, Red kind) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(ReduceArgs a, reduce_args(ctx, x, false));
  const ReduceGeom& g = a.g;
  const auto rows = static_cast<std::size_t>(g.outer * g.inner);
  RefVec out(rows), c_acc(rows, 0.0);
  const double len = static_cast<double>(g.len);
  for_rows(x.data, g, [&](std::int64_t r, const double* row) {
    const auto ri = static_cast<std::size_t>(r);
    double v = 0.0, c = 0.0;
    switch (kind) {
      case Red::sum:
      case Red::mean: {
        double s = 0.0;
        SumGrowth grow;
        for (std::int64_t k = 0; k < g.len; ++k) s += row[k], grow.add(row[k]);
        const double m = grow.abs_sum();
        const double root =
            grow.growth(len) + SumGrowth::absorbed(g.len, m, [row](std::int64_t k) { return row[k]; });
        v = kind == Red::sum ? s : s / len;
        c = kind == Red::sum ? m * root : overflow_guard(m * root / len, m);
        break;
      }
      case Red::amax: {
        double m = k_neg_inf;
        for (std::int64_t k = 0; k < g.len; ++k) {
          if (std::isnan(row[k])) {
            m = row[k];
            break;
          }
          if (row[k] > m) m = row[k];
        }
        v = m;
        break;
      }
      case Red::argmax: {
        std::int64_t best = 0;
        for (std::int64_t k = 0; k < g.len; ++k) {
          if (std::isnan(row[k])) {
            best = k;
            break;
          }
          if (row[k] > row[best]) best = k;
        }
        v = static_cast<double>(best);
        break;
      }
      case Red::logsumexp: {
        // torch: maxes = amax(x); maxes[|maxes| == inf] = 0; log(sum(exp(x - maxes))) + maxes.
        double m = k_neg_inf;
        bool nan = false;
        for (std::int64_t k = 0; k < g.len; ++k) nan |= std::isnan(row[k]), m = std::max(m, row[k]);
        if (nan) m = k_nan;
        const double shift = std::isinf(m) ? 0.0 : m;
        double s = 0.0, spread = 0.0;
        SumGrowth grow;
        for (std::int64_t k = 0; k < g.len; ++k) {
          const double e = std::exp(row[k] - shift);
          s += e;
          grow.add(e);
          if (e > 0.0) spread += e * std::fabs(row[k] - shift);  // a -inf entry adds nothing
        }
        v = std::log(s) + shift;
        // exp terms within an ulp or two of the sum (absorbed); the rest are not recomputed.
        const double log_lim = std::log(2.0 * 0x1p-24 * s);
        const double absorbed = SumGrowth::absorbed(g.len, s, [&](std::int64_t k) {
          const double d = row[k] - shift;
          return d > log_lim ? std::numeric_limits<double>::infinity() : std::exp(d);
        });
        // The exp terms repeat where the logits do (exp is monotone): a low-precision row holds few
        // distinct values, and a running sum's roundings repeat with them (repeat_growth).
        const double repeats = SumGrowth::repeat_growth(g.len, [&](std::int64_t k) { return row[k]; });
        // The max's term is exp(0) = 1, the largest: a running sum that meets it early adds every
        // later term at S ~ s, each rounding uniform within +-u*s, so the sum's error has a standard
        // deviation up to u*s*sqrt(n/3). sqrt(n) alone put the envelope (2) at 3.5 of those: rows
        // whose log-sum-exp is near 0 (no output rounding to hide it) failed a single-thread fp32
        // loop once in ~10^7 rows. sqrt(3n) puts it at 6 (docs/error-model.md, "logsumexp near 0").
        const double stat = std::sqrt(3.0 * len);
        c = std::fabs(m) + std::fabs(v) + std::max({grow.growth(len), repeats, stat}) + absorbed + spread / s;
        break;
      }
    }
    out[ri] = v;
    c_acc[ri] = finite(v) && finite(c) ? c : 0.0;
  });
  if (kind == Red::argmax) return single_output(DType::int64, a.out_shape, std::move(out));
  if (kind == Red::amax) return single_output(ctx.output_dtype(), a.out_shape, std::move(out));
  RefVec c_in;
  if (kind == Red::mean) {
    // PyTorch's mean is sum(x) / n with the sum held in the input dtype: one rounding of the sum,
    // u_in·|sum| / n = u_in·|mean|, no cancellation after it. (A sum that overflows the input dtype
    // is not covered: a mean of representable values returned as Inf is wrong.)
    c_in = output_buffer(static_cast<std::int64_t>(out.size()));
    for (std::size_t i = 0; i < out.size(); ++i) c_in[i] = finite(out[i]) ? std::fabs(out[i]) : 0.0;
  }
  return single_output(ctx.output_dtype(), a.out_shape, std::move(out), std::move(c_acc), std::move(c_in));
}

Result<std::vector<RefOutput>> l2norm_reference(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(ReduceArgs a, reduce_args(ctx, x, true));
  const ReduceGeom& g = a.g;
  const double eps = ctx.attr_float("eps");
  const double sqrt_len = std::sqrt(static_cast<double>(g.len));
  RefVec out(x.data.size()), c_acc(x.data.size());
  for_rows(x.data, g, [&](std::int64_t r, const double* row) {
    double ss = 0.0;
    // The sum of squares' relative error, halved by the square root. Rows of near-equal |x|
    // (an expanded row, a large offset) round one-signed in a running sum (SumGrowth): PyTorch's
    // vector_norm over a strided dim sums that way (evidence/conformance/probe_l2norm.py: 312 u at
    // N = 3819, as a plain fp32 loop).
    SumGrowth grow;
    for (std::int64_t k = 0; k < g.len; ++k) {
      ss += row[k] * row[k];
      grow.add(row[k] * row[k]);
    }
    const double norm = std::sqrt(ss);
    const double denom = std::isnan(norm) || norm > eps ? norm : eps;  // clamp_min keeps NaN
    const double absorbed =
        SumGrowth::absorbed(g.len, ss, [row](std::int64_t k) { return row[k] * row[k]; });
    const double growth =
        2.0 + std::max(sqrt_len, (grow.growth(static_cast<double>(g.len)) + absorbed) / 2.0);
    for (std::int64_t k = 0; k < g.len; ++k) {
      const double v = row[k] / denom;
      out[flat(g, r, k)] = v;
      c_acc[flat(g, r, k)] = finite(v) ? overflow_guard(std::fabs(v) * growth, ss) : 0.0;
    }
  });
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc));
}

Result<std::vector<RefOutput>> cumsum_reference(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(ReduceArgs a, reduce_args(ctx, x, true));
  const ReduceGeom& g = a.g;
  RefVec out(x.data.size()), c_acc(x.data.size());
  for_rows(x.data, g, [&](std::int64_t r, const double* row) {
    double s = 0.0;
    SumGrowth grow;  // of the prefix: a scan's running sum is a single-thread loop's
    for (std::int64_t k = 0; k < g.len; ++k) {
      s += row[k];
      grow.add(row[k]);
      out[flat(g, r, k)] = s;
      c_acc[flat(g, r, k)] =
          finite(s) ? grow.abs_sum() *
                          (grow.growth(static_cast<double>(k + 1)) + grow.prefix_absorbed())
                    : 0.0;
    }
  });
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc));
}

// ---- emulated kernels --------------------------------------------------------------------------

// A kernel over rows: fn(row as floats, len, in dtype, out row pointer (1 value or len values)).
template <class RowKernel>
KernelFn row_kernel(bool same_shape, bool int_output, RowKernel fn) {
  return [=](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& x = ctx.input("x");
    GPUEMU_TRY(ReduceArgs a, reduce_args(ctx, x, same_shape));
    const ReduceGeom& g = a.g;
    const DType od = int_output ? DType::int64 : ctx.output_dtype();
    const std::int64_t per_row = same_shape ? g.len : 1;
    std::vector<double> out(static_cast<std::size_t>(g.outer * g.inner * per_row));
    const std::int64_t rows = g.outer * g.inner;
    parallel_for(
        rows,
        [&](std::int64_t b, std::int64_t e) {
          std::vector<double> buf, res(static_cast<std::size_t>(per_row));
          std::vector<float> row32(static_cast<std::size_t>(g.len));
          for (std::int64_t r = b; r < e; ++r) {
            const double* row = row_of(x.data, g, r, buf);
            for (std::int64_t k = 0; k < g.len; ++k)
              row32[static_cast<std::size_t>(k)] = f32(row[k]);
            fn(row32.data(), g.len, x.dtype, res.data());
            if (same_shape) {
              for (std::int64_t k = 0; k < g.len; ++k)
                out[flat(g, r, k)] = round_to(od, res[static_cast<std::size_t>(k)]);
            } else {
              out[static_cast<std::size_t>(r)] = round_to(od, res[0]);
            }
          }
        },
        std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(g.len, 1)));
    return KernelOutputs{std::move(out)};
  };
}

KernelFn sum_kernel(bool mean, RowSum how, std::int64_t block, bool padded_divisor = false) {
  return row_kernel(false, false, [=](const float* x, std::int64_t len, DType dt, double* res) {
    const float s = row_sum(len, how, block, dt, [x](std::int64_t k) { return x[k]; });
    const float n = static_cast<float>(padded_divisor ? padded_length(len, block) : len);
    res[0] = mean ? s / n : s;
  });
}

BuiltinOp sum_op(bool mean) {
  BuiltinOp op;
  op.name = mean ? "mean" : "sum";
  op.reference = [mean](const RefContext& ctx) {
    return reduce_reference(ctx, mean ? Red::mean : Red::sum);
  };
  op.controls = {
      {"fp32_tiled",
       "1024-wide tiles summed as trees in fp32, tile sums added to an fp32 accumulator",
       sum_kernel(mean, RowSum::tiled, 1024)},
      {"fp32_warp", "a warp per row: 32 lanes of strided fp32 running sums, then a shuffle tree",
       sum_kernel(mean, RowSum::lanes, 1)},
      {"fp32_split", "the row split over 8 CTAs (two-stage reduction), fp32 partials",
       sum_kernel(mean, RowSum::split, 1)},
  };
  op.buggy = {
      {"lowp_accumulator", "the running sum is kept in the input dtype (`scalar_t acc`)",
       sum_kernel(mean, RowSum::lowp, 1)},
      {"tail_dropped", "loops over len // 1024 tiles: the partial tail tile is never added",
       sum_kernel(mean, RowSum::tail_dropped, 1024)},
      {"acc_overwrite", "`acc = tl.sum(tile)` instead of `acc +=` over 256-wide tiles",
       sum_kernel(mean, RowSum::overwrite, 256)},
  };
  if (mean)
    op.buggy.push_back({"padded_divisor", "divides by the length padded to a multiple of BLOCK=128",
                        sum_kernel(true, RowSum::tiled, 128, true)});
  return op;
}

enum class MaxVariant { tiled, tree, zero_init, tail_dropped, fmax };

// NaN-propagating max of two floats (NaN wins), as torch's max kernels compare.
inline float nan_max(float a, float b) {
  return (std::isnan(a) || a > b) ? a : b;
}

KernelFn amax_kernel(MaxVariant v) {
  return row_kernel(false, false, [v](const float* x, std::int64_t len, DType, double* res) {
    constexpr std::int64_t block = 1024;
    float m = v == MaxVariant::zero_init ? 0.0f : -k_inf_f;
    const std::int64_t end = v == MaxVariant::tail_dropped ? len / block * block : len;
    if (v == MaxVariant::tree) {
      std::vector<float> buf(x, x + len);
      for (std::int64_t w = 1; w < len; w *= 2)
        for (std::int64_t i = 0; i + w < len; i += 2 * w)
          buf[static_cast<std::size_t>(i)] =
              nan_max(buf[static_cast<std::size_t>(i)], buf[static_cast<std::size_t>(i + w)]);
      m = len > 0 ? buf[0] : m;
    } else {
      for (std::int64_t k = 0; k < end; ++k)
        m = v == MaxVariant::fmax ? std::fmax(m, x[k]) : nan_max(m, x[k]);
    }
    res[0] = m;
  });
}

// argmax: (value, index) pairs, NaN greater than everything, ties to the smaller index.
inline bool better(float a, std::int64_t ia, float b, std::int64_t ib) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && (!std::isnan(b) || ia < ib);
  return a > b || (a == b && ia < ib);
}

enum class ArgVariant { tiled, tree, tile_local_index, zero_init, nan_ignored };

KernelFn argmax_kernel(ArgVariant v) {
  return row_kernel(false, true, [v](const float* x, std::int64_t len, DType, double* res) {
    constexpr std::int64_t block = 128;
    if (v == ArgVariant::tree) {
      std::vector<float> val(x, x + len);
      std::vector<std::int64_t> idx(static_cast<std::size_t>(len));
      for (std::int64_t k = 0; k < len; ++k) idx[static_cast<std::size_t>(k)] = k;
      for (std::int64_t w = 1; w < len; w *= 2)
        for (std::int64_t i = 0; i + w < len; i += 2 * w) {
          const auto a = static_cast<std::size_t>(i), b = static_cast<std::size_t>(i + w);
          if (better(val[b], idx[b], val[a], idx[a])) val[a] = val[b], idx[a] = idx[b];
        }
      res[0] = static_cast<double>(idx[0]);
      return;
    }
    float best_v = v == ArgVariant::zero_init ? 0.0f : -k_inf_f;
    std::int64_t best_i = v == ArgVariant::zero_init ? 0 : -1;
    for (std::int64_t t = 0; t < len; t += block) {
      // Tile-local argmax, then merged into the running best.
      float tv = -k_inf_f;
      std::int64_t ti = -1;
      for (std::int64_t k = t; k < std::min(len, t + block); ++k) {
        if (v == ArgVariant::nan_ignored) {
          if (x[k] > tv || ti < 0) tv = x[k], ti = k;  // NaN compares false: skipped unless first
        } else if (ti < 0 || better(x[k], k, tv, ti)) {
          tv = x[k], ti = k;
        }
      }
      const std::int64_t reported = v == ArgVariant::tile_local_index ? ti - t : ti;
      const bool take =
          best_i < 0 ||
          (v == ArgVariant::nan_ignored ? tv > best_v : better(tv, ti, best_v, best_i));
      if (take) best_v = tv, best_i = reported;
    }
    res[0] = static_cast<double>(std::max<std::int64_t>(best_i, 0));
  });
}

enum class LseVariant { two_pass, online, no_max, online_no_rescale, lowp_sum };

KernelFn lse_kernel(LseVariant v) {
  return row_kernel(false, false, [v](const float* x, std::int64_t len, DType dt, double* res) {
    float m = -k_inf_f;
    for (std::int64_t k = 0; k < len; ++k) m = nan_max(m, x[k]);
    if (v == LseVariant::online || v == LseVariant::online_no_rescale) {
      constexpr std::int64_t block = 128;
      float run_m = -k_inf_f, s = 0.0f;
      for (std::int64_t t = 0; t < len; t += block) {
        float tm = -k_inf_f;
        for (std::int64_t k = t; k < std::min(len, t + block); ++k) tm = nan_max(tm, x[k]);
        const float m_new = nan_max(run_m, tm);
        const float shift = std::isinf(m_new) ? 0.0f : m_new;
        float ts = 0.0f;
        for (std::int64_t k = t; k < std::min(len, t + block); ++k) ts += std::exp(x[k] - shift);
        const float old_shift = std::isinf(run_m) ? 0.0f : run_m;
        if (v == LseVariant::online_no_rescale || s == 0.0f)
          s += ts;
        else
          s = s * std::exp(old_shift - shift) + ts;
        run_m = m_new;
      }
      res[0] = std::log(s) + (std::isinf(run_m) ? 0.0f : run_m);
      return;
    }
    const float shift = (v == LseVariant::no_max || std::isinf(m)) ? 0.0f : m;
    const RowSum how = v == LseVariant::lowp_sum ? RowSum::lowp : RowSum::tiled;
    const float s =
        row_sum(len, how, 1024, dt, [&](std::int64_t k) { return std::exp(x[k] - shift); });
    res[0] = std::log(s) + shift;
  });
}

enum class L2Variant { two_pass, rsqrt, lowp, tail_dropped, eps_inside_rsqrt };

KernelFn l2norm_kernel(L2Variant v) {
  return [v](const RefContext& ctx) -> Result<KernelOutputs> {
    const float eps = f32(ctx.attr_float("eps"));
    return row_kernel(
        true, false, [v, eps](const float* x, std::int64_t len, DType dt, double* res) {
          const RowSum how = v == L2Variant::lowp           ? RowSum::lowp
                             : v == L2Variant::tail_dropped ? RowSum::tail_dropped
                                                            : RowSum::tiled;
          const float ss = row_sum(len, how, 1024, dt, [x](std::int64_t k) { return x[k] * x[k]; });
          if (v == L2Variant::rsqrt || v == L2Variant::eps_inside_rsqrt) {
            const float arg = v == L2Variant::rsqrt ? nan_max(ss, eps * eps) : ss + eps;
            const float inv = f32(1.0 / std::sqrt(static_cast<double>(arg)));
            for (std::int64_t k = 0; k < len; ++k) res[k] = x[k] * inv;
          } else {
            const float denom = nan_max(std::sqrt(ss), eps);
            for (std::int64_t k = 0; k < len; ++k) res[k] = x[k] / denom;
          }
        })(ctx);
  };
}

enum class ScanVariant { warp_chunks, blocked, lowp, carry_overwrite, exclusive };

KernelFn cumsum_kernel(ScanVariant v) {
  return row_kernel(true, false, [v](const float* x, std::int64_t len, DType dt, double* res) {
    if (v == ScanVariant::warp_chunks) {
      // 32 contiguous chunks, each scanned in sequence by one lane; the chunk totals' exclusive
      // scan (Hillis-Steele over 32 lanes) is added to every chunk.
      const std::int64_t chunk = (len + 31) / 32;
      std::array<float, 32> total{}, tmp{};
      for (std::int64_t c = 0; c < 32; ++c) {
        float s = 0.0f;
        for (std::int64_t k = c * chunk; k < std::min(len, (c + 1) * chunk); ++k)
          res[k] = s += x[k];
        total[static_cast<std::size_t>(c)] = s;
      }
      for (std::int64_t off = 1; off < 32; off *= 2) {
        for (std::size_t c = 0; c < 32; ++c)
          tmp[c] = total[c] + (c >= static_cast<std::size_t>(off)
                                   ? total[c - static_cast<std::size_t>(off)]
                                   : 0.0f);
        total = tmp;
      }
      for (std::int64_t c = 1; c < 32; ++c)
        for (std::int64_t k = c * chunk; k < std::min(len, (c + 1) * chunk); ++k)
          res[k] = static_cast<double>(total[static_cast<std::size_t>(c - 1)] +
                                       static_cast<float>(res[k]));
      return;
    }
    if (v == ScanVariant::lowp || v == ScanVariant::exclusive) {
      float s = 0.0f;
      for (std::int64_t k = 0; k < len; ++k) {
        const float before = s;
        s = v == ScanVariant::lowp ? store_as(dt, s + x[k]) : s + x[k];
        res[k] = v == ScanVariant::exclusive ? before : s;
      }
      return;
    }
    // Blocked scan: each 256-wide tile scanned in fp32 (Hillis-Steele), plus the carry of the
    // tiles before it.
    constexpr std::int64_t block = 256;
    std::array<float, block> a, b;
    float carry = 0.0f;
    for (std::int64_t t = 0; t < len; t += block) {
      const std::int64_t n = std::min(block, len - t);
      for (std::int64_t k = 0; k < n; ++k) a[static_cast<std::size_t>(k)] = x[t + k];
      for (std::int64_t off = 1; off < n; off *= 2) {
        for (std::int64_t k = 0; k < n; ++k)
          b[static_cast<std::size_t>(k)] = a[static_cast<std::size_t>(k)] +
                                           (k >= off ? a[static_cast<std::size_t>(k - off)] : 0.0f);
        a = b;
      }
      for (std::int64_t k = 0; k < n; ++k) res[t + k] = carry + a[static_cast<std::size_t>(k)];
      const float tile_total = a[static_cast<std::size_t>(n - 1)];
      carry = v == ScanVariant::carry_overwrite ? tile_total : carry + tile_total;
    }
  });
}

}  // namespace

void register_reduction_ops(BuiltinRegistry& r) {
  r.add(sum_op(false));
  r.add(sum_op(true));
  r.add({"amax",
         exact_reference([](const RefContext& ctx) { return reduce_reference(ctx, Red::amax); }),
         {{"fp32_tiled", "running max over 1024-wide tiles from -inf, NaN propagating",
           amax_kernel(MaxVariant::tiled)},
          {"fp32_tree", "pairwise tree of NaN-propagating max", amax_kernel(MaxVariant::tree)}},
         {{"zero_init", "the running max starts at 0: all-negative rows give 0",
           amax_kernel(MaxVariant::zero_init)},
          {"tail_dropped", "loops over len // 1024 tiles only",
           amax_kernel(MaxVariant::tail_dropped)},
          {"fmax_drops_nan", "fmaxf: NaN is ignored where torch.amax returns NaN",
           amax_kernel(MaxVariant::fmax)}}});
  r.add({"argmax",
         [](const RefContext& ctx) { return reduce_reference(ctx, Red::argmax); },
         {{"fp32_tiled",
           "128-wide tiles: first index of each tile's max, merged keeping the earlier index on "
           "ties, NaN as the maximum",
           argmax_kernel(ArgVariant::tiled)},
          {"fp32_tree", "pairwise tree of (value, index), ties to the smaller index",
           argmax_kernel(ArgVariant::tree)}},
         {{"tile_local_index",
           "returns the index inside its 128-wide tile (the tile offset is never added)",
           argmax_kernel(ArgVariant::tile_local_index)},
          {"zero_init", "best value starts at 0 with index 0: all-negative rows give 0",
           argmax_kernel(ArgVariant::zero_init)},
          {"nan_ignored", "`x > best` skips NaN, so rows holding NaN point at a finite value",
           argmax_kernel(ArgVariant::nan_ignored)}}});
  r.add({"logsumexp",
         [](const RefContext& ctx) { return reduce_reference(ctx, Red::logsumexp); },
         {{"fp32_two_pass",
           "max pass, fp32 tile sums of exp(x - max), log + max (torch's inf masking)",
           lse_kernel(LseVariant::two_pass)},
          {"fp32_online", "online max/sum over 128-wide tiles with the rescale",
           lse_kernel(LseVariant::online)}},
         {{"no_max_subtraction", "log(sum(exp(x))): overflows for x > 88",
           lse_kernel(LseVariant::no_max)},
          {"online_no_rescale", "online sum that forgets s *= exp(m_old - m_new)",
           lse_kernel(LseVariant::online_no_rescale)},
          {"lowp_sum", "the sum of exp is kept in the input dtype",
           lse_kernel(LseVariant::lowp_sum)}}});
  r.add({"l2norm",
         l2norm_reference,
         {{"fp32_two_pass", "fp32 tiled sum of squares, x / max(sqrt(ss), eps)",
           l2norm_kernel(L2Variant::two_pass)},
          {"fp32_rsqrt", "x * rsqrt(max(ss, eps^2))", l2norm_kernel(L2Variant::rsqrt)}},
         {{"lowp_accumulator", "the sum of squares is kept in the input dtype",
           l2norm_kernel(L2Variant::lowp)},
          {"tail_dropped", "the sum of squares skips the partial tail tile (BLOCK=1024)",
           l2norm_kernel(L2Variant::tail_dropped)},
          {"eps_inside_rsqrt", "x * rsqrt(ss + eps): eps added to the squared norm",
           l2norm_kernel(L2Variant::eps_inside_rsqrt)}}});
  r.add({"cumsum",
         cumsum_reference,
         {{"fp32_warp_chunks",
           "32 contiguous chunks scanned in sequence by one lane each, plus the scanned "
           "chunk totals",
           cumsum_kernel(ScanVariant::warp_chunks)},
          {"fp32_blocked_scan", "256-wide tiles scanned in fp32 (Hillis-Steele) plus an fp32 carry",
           cumsum_kernel(ScanVariant::blocked)}},
         {{"lowp_running_sum",
           "the running sum is stored in the input dtype at every step (what PyTorch's "
           "CUDA cumsum does for float16/bfloat16)",
           cumsum_kernel(ScanVariant::lowp)},
          {"carry_overwrite", "`carry = tile_total` instead of `carry += tile_total`",
           cumsum_kernel(ScanVariant::carry_overwrite)},
          {"exclusive_scan", "writes the sum before each element (exclusive scan)",
           cumsum_kernel(ScanVariant::exclusive)}}});
}

}  // namespace gpuemu::ops
