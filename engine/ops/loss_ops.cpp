// cross_entropy (class-index targets, ignore_index, mean/sum/none, label smoothing) and embedding.
// fp64 references with their condition terms, correct controls (fused fp32 two-pass and online
// log-sum-exp; PyTorch's decomposition that stores log_softmax in the input dtype before nll_loss;
// a plain gather), and known-buggy kernels.
//
// Error model (docs/error-model.md). cross_entropy per row i (m = max, p = softmax, s = label
// smoothing):
//   c_i    = |m| + |lse| + |x_t| + G(C) + sum_c p_c |x_c - m|  [+ s * (|lse| + sum|x| / C * G(C))]
//   cin_i  = (1 - s) * |log p_t| + s * mean_c |log p_c|
// 'none' returns those per row; 'sum' adds the fp32 sum over rows, c_acc = sum c_i +
// G(n) * sum |loss_i|, c_in = sum cin_i; 'mean' divides both by the count n of non-ignored rows.
// embedding is a copy: no condition term.
#include "core/parallel.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace gpuemu::ops {
namespace {

// ---- cross_entropy -----------------------------------------------------------------------------

enum class Reduction { mean, sum, none };

struct CeArgs {
  std::int64_t rows = 0, classes = 0, ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double smoothing = 0.0;
  std::vector<std::int64_t> target;  // -1 marks an ignored row
};

Result<CeArgs> ce_args(const RefContext& ctx) {
  const RefArg& logits = ctx.input("logits");
  const RefArg& target = ctx.input("target");
  if (logits.shape.size() != 2)
    return make_error(ErrorCode::shape_mismatch,
                      "logits must be [N, C], got " + shape_to_string(logits.shape));
  CeArgs a;
  a.rows = logits.shape[0];
  a.classes = logits.shape[1];
  if (target.numel() != a.rows)
    return make_error(ErrorCode::shape_mismatch,
                      "target must have N = " + std::to_string(a.rows) + " elements");
  a.ignore_index = ctx.attr_int("ignore_index");
  const std::string red = ctx.attr_string("reduction");
  if (red == "mean")
    a.reduction = Reduction::mean;
  else if (red == "sum")
    a.reduction = Reduction::sum;
  else if (red == "none")
    a.reduction = Reduction::none;
  else
    return make_error(ErrorCode::invalid_argument,
                      "reduction must be 'mean', 'sum' or 'none', got '" + red + "'");
  a.smoothing = ctx.attr_float("label_smoothing");
  if (!(a.smoothing >= 0.0 && a.smoothing <= 1.0))
    return make_error(ErrorCode::invalid_argument, "label_smoothing must be in [0, 1]");
  a.target.resize(static_cast<std::size_t>(a.rows));
  for (std::int64_t i = 0; i < a.rows; ++i) {
    const double t = target.data[static_cast<std::size_t>(i)];
    const auto ti = static_cast<std::int64_t>(t);
    if (static_cast<double>(ti) != t)
      return make_error(ErrorCode::invalid_argument,
                        "target[" + std::to_string(i) + "] is not an integer");
    if (ti == a.ignore_index) {
      a.target[static_cast<std::size_t>(i)] = -1;
    } else if (ti < 0 || ti >= a.classes) {
      return make_error(ErrorCode::invalid_argument,
                        "target[" + std::to_string(i) + "] = " + std::to_string(ti) +
                            " is outside [0, " + std::to_string(a.classes) + ")");
    } else {
      a.target[static_cast<std::size_t>(i)] = ti;
    }
  }
  return a;
}

// Combines per-row losses into the output per `reduction` (fp64).
Result<std::vector<RefOutput>> cross_entropy_reference(const RefContext& ctx) {
  GPUEMU_TRY(CeArgs a, ce_args(ctx));
  const RefArg& logits = ctx.input("logits");
  const auto n = static_cast<std::size_t>(a.rows);
  RefVec loss(n, 0.0), c(n, 0.0), cin(n, 0.0);
  std::vector<double> peak(n, 0.0);
  // The largest log-probability a kernel that stores log_softmax in the input dtype rounds there:
  // past that dtype's range it overflows to -inf legitimately (the verdict reads c_in >= the
  // dtype's max as indeterminate), so c_in takes it when it gets there.
  const double in_max = dtype_info(logits.dtype).max_finite;
  const double classes = static_cast<double>(a.classes), s = a.smoothing;
  parallel_for(
      a.rows,
      [&](std::int64_t rb, std::int64_t re) {
        for (std::int64_t r = rb; r < re; ++r) {
          const auto ri = static_cast<std::size_t>(r);
          const std::int64_t t = a.target[ri];
          if (t < 0) continue;  // ignored: contributes 0
          const double* x = logits.data.data() + r * a.classes;
          double m = -std::numeric_limits<double>::infinity();
          bool nan = false;
          for (std::int64_t k = 0; k < a.classes; ++k)
            nan |= std::isnan(x[k]), m = std::max(m, x[k]);
          if (nan) m = k_nan;
          double sum_e = 0.0, spread = 0.0, sum_x = 0.0;
          SumGrowth grow_e, grow_x;  // the fp32 sums' growth: sqrt(C), more over near-equal terms
          for (std::int64_t k = 0; k < a.classes; ++k) {
            const double e = std::exp(x[k] - m);
            sum_e += e;
            grow_e.add(e);
            if (e > 0.0) spread += e * std::fabs(x[k] - m);  // a -inf logit adds nothing
            sum_x += x[k];
            grow_x.add(x[k]);
          }
          const double sum_abs = grow_x.abs_sum();
          const double lse = m + std::log(sum_e);
          const double logp_t = x[t] - lse;
          double l = -logp_t, abs_logp_mean = 0.0;
          peak[ri] = std::fabs(logp_t);
          if (s > 0.0) {
            for (std::int64_t k = 0; k < a.classes; ++k) {
              abs_logp_mean += std::fabs(x[k] - lse);
              peak[ri] = std::max(peak[ri], std::fabs(x[k] - lse));
            }
            abs_logp_mean /= classes;
            l = (1.0 - s) * l + s * (lse - sum_x / classes);
          }
          loss[ri] = l;
          if (finite(l)) {
            // Absorbed terms (SumGrowth::absorbed): exp terms within an ulp or two of sum_e, x
            // terms of the smoothing sum within an ulp or two of sum|x|.
            const double log_lim = std::log(2.0 * 0x1p-24 * sum_e);
            const double absorbed_e = SumGrowth::absorbed(a.classes, sum_e, [&](std::int64_t k) {
              const double d = x[k] - m;
              return d > log_lim ? std::numeric_limits<double>::infinity() : std::exp(d);
            });
            const double absorbed_x =
                s > 0.0 ? SumGrowth::absorbed(a.classes, sum_abs, [x](std::int64_t k) { return x[k]; })
                        : 0.0;
            // Both sums' terms repeat where the logits do (repeat_growth; exp is monotone).
            const double repeats = SumGrowth::repeat_growth(a.classes, [x](std::int64_t k) { return x[k]; });
            c[ri] = std::fabs(m) + std::fabs(lse) + std::fabs(x[t]) + std::max(grow_e.growth(classes), repeats) +
                    absorbed_e + spread / sum_e +
                    s * (std::fabs(lse) +
                         sum_abs / classes * (std::max(grow_x.growth(classes), repeats) + absorbed_x));
            c[ri] = overflow_guard(c[ri], sum_abs);
            cin[ri] = (1.0 - s) * std::fabs(logp_t) + s * abs_logp_mean;
            if (peak[ri] >= in_max) cin[ri] = std::max(cin[ri], peak[ri]);
          }
        }
      },
      std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(a.classes, 1)));
  const DType od = ctx.output_dtype();
  if (a.reduction == Reduction::none)
    return single_output(od, {a.rows}, std::move(loss), std::move(c), std::move(cin));
  double total = 0.0, c_sum = 0.0, cin_sum = 0.0, peak_max = 0.0;
  SumGrowth grow;
  std::int64_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (finite(peak[i])) peak_max = std::max(peak_max, peak[i]);
    total += loss[i];
    if (a.target[i] >= 0) grow.add(loss[i]);
    c_sum += c[i];
    cin_sum += cin[i];
    count += a.target[i] >= 0;
  }
  const double total_abs = grow.abs_sum();
  double value = total,
         c_acc = c_sum +
                 (count > 0 ? grow.growth(static_cast<double>(count)) +
                                  SumGrowth::absorbed(static_cast<std::int64_t>(n), total_abs,
                                                      [&](std::int64_t i) {
                                                        const auto k = static_cast<std::size_t>(i);
                                                        return a.target[k] >= 0 ? loss[k] : 0.0;
                                                      })
                            : 0.0) *
                     total_abs,
         c_in = cin_sum;
  if (a.reduction == Reduction::mean) {
    const double cnt = static_cast<double>(count);
    value = total / cnt;  // 0 / 0 = NaN when every row is ignored, as torch
    c_acc /= cnt;
    c_in /= cnt;
  }
  if (peak_max >= in_max) c_in = std::max(c_in, peak_max);
  if (!finite(value)) c_acc = c_in = 0.0;
  return single_output(od, {}, {value}, {c_acc}, {c_in});
}

enum class CeVariant { fused, online, logp_rounded, ignore_counted, no_max, lowp_sum };

KernelFn cross_entropy_kernel(CeVariant v) {
  return [v](const RefContext& ctx) -> Result<KernelOutputs> {
    GPUEMU_TRY(CeArgs a, ce_args(ctx));
    const RefArg& logits = ctx.input("logits");
    const DType dt = logits.dtype, od = ctx.output_dtype();
    const float s = f32(a.smoothing), classes = static_cast<float>(a.classes);
    std::vector<float> loss(static_cast<std::size_t>(a.rows), 0.0f);
    parallel_for(
        a.rows,
        [&](std::int64_t rb, std::int64_t re) {
          std::vector<float> x(static_cast<std::size_t>(a.classes));
          for (std::int64_t r = rb; r < re; ++r) {
            const std::int64_t t = a.target[static_cast<std::size_t>(r)];
            if (t < 0) continue;
            for (std::int64_t k = 0; k < a.classes; ++k)
              x[static_cast<std::size_t>(k)] =
                  f32(logits.data[static_cast<std::size_t>(r * a.classes + k)]);
            const float* xp = x.data();
            float m = -k_inf_f, lse = 0.0f;
            for (std::int64_t k = 0; k < a.classes; ++k)
              m = std::isnan(xp[k]) || xp[k] > m ? xp[k] : m;
            if (v == CeVariant::online) {
              constexpr std::int64_t block = 128;
              float run_m = -k_inf_f, sum = 0.0f;
              for (std::int64_t b = 0; b < a.classes; b += block) {
                float tm = -k_inf_f;
                for (std::int64_t k = b; k < std::min(a.classes, b + block); ++k)
                  tm = std::isnan(xp[k]) || xp[k] > tm ? xp[k] : tm;
                const float m_new = std::isnan(tm) || tm > run_m ? tm : run_m;
                float ts = 0.0f;
                for (std::int64_t k = b; k < std::min(a.classes, b + block); ++k)
                  ts += std::exp(xp[k] - m_new);
                sum = (sum == 0.0f ? 0.0f : sum * std::exp(run_m - m_new)) + ts;
                run_m = m_new;
              }
              lse = run_m + std::log(sum);
            } else {
              const float shift = v == CeVariant::no_max ? 0.0f : m;
              const RowSum how = v == CeVariant::lowp_sum ? RowSum::lowp : RowSum::tiled;
              lse = shift + std::log(row_sum(a.classes, how, 1024, dt, [&](std::int64_t k) {
                      return std::exp(xp[k] - shift);
                    }));
            }
            float l = 0.0f;
            if (v == CeVariant::logp_rounded) {
              // log_softmax stored in the input dtype, then nll_loss (and the smoothing term) read
              // it.
              auto logp = [&](std::int64_t k) { return store_as(dt, xp[k] - lse); };
              l = -logp(t);
              if (s > 0.0f) {
                const float mean_logp = row_sum(a.classes, RowSum::tiled, 1024, dt, logp) / classes;
                l = (1.0f - s) * l - s * mean_logp;
              }
            } else {
              l = lse - xp[t];
              if (s > 0.0f) {
                const float mean_x = row_sum(a.classes, RowSum::tiled, 1024, dt,
                                             [&](std::int64_t k) { return xp[k]; }) /
                                     classes;
                l = (1.0f - s) * l + s * (lse - mean_x);
              }
            }
            loss[static_cast<std::size_t>(r)] = l;
          }
        },
        std::max<std::int64_t>(1, (1 << 13) / std::max<std::int64_t>(a.classes, 1)));
    if (a.reduction == Reduction::none) {
      std::vector<double> out(loss.size());
      for (std::size_t i = 0; i < loss.size(); ++i)
        out[i] = round_to(od, static_cast<double>(loss[i]));
      return KernelOutputs{std::move(out)};
    }
    const float total = row_sum(a.rows, RowSum::tiled, 1024, dt,
                                [&](std::int64_t i) { return loss[static_cast<std::size_t>(i)]; });
    float value = total;
    if (a.reduction == Reduction::mean) {
      std::int64_t count = 0;
      for (auto t : a.target) count += t >= 0;
      value = total / static_cast<float>(v == CeVariant::ignore_counted ? a.rows : count);
    }
    return KernelOutputs{{round_to(od, static_cast<double>(value))}};
  };
}

BuiltinOp cross_entropy_op() {
  BuiltinOp op;
  op.name = "cross_entropy";
  op.reference = cross_entropy_reference;
  op.controls = {
      {"fused_fp32",
       "per row: max, fp32 tiled sum of exp(x - max), loss = lse - x_t; fp32 sum over rows",
       cross_entropy_kernel(CeVariant::fused)},
      {"online_fp32", "online log-sum-exp over 128-wide tiles with the rescale",
       cross_entropy_kernel(CeVariant::online)},
      {"log_softmax_rounded",
       "PyTorch's decomposition: log_softmax stored in the input dtype, then nll_loss",
       cross_entropy_kernel(CeVariant::logp_rounded)},
  };
  op.buggy = {
      {"ignore_counted_in_mean", "'mean' divides by N, counting ignored rows",
       cross_entropy_kernel(CeVariant::ignore_counted)},
      {"no_max_subtraction", "log(sum(exp(x))): overflows for logits > 88",
       cross_entropy_kernel(CeVariant::no_max)},
      {"lowp_sum", "the sum of exp(x - max) is kept in the input dtype",
       cross_entropy_kernel(CeVariant::lowp_sum)},
  };
  return op;
}

// ---- cross_entropy_backward --------------------------------------------------------------------
//
// The gradient of the loss F.cross_entropy(logits, target, ignore_index, reduction,
// label_smoothing) with respect to the logits, given its upstream gradient grad_out (a scalar g for
// reduction 'mean' or 'sum', one g_i per row for 'none'): for a row i whose target t is not ignored,
//   grad[i, c] = k_i * (p_c - q_c),  p = softmax(x_i),  q_c = (1 - s) [c == t] + s / C,
// k_i = g / n ('mean', n the rows not ignored), g ('sum') or g_i ('none'); an ignored row's
// gradient is 0 (torch skips it under 'none' too, whatever g_i is).
// Error model (docs/error-model.md, "cross_entropy_backward"), an fp32 kernel's evaluation, per row
// with k = k_i (each row's arithmetic sees only its own scale: 'none' changes nothing else):
//   c_acc = |k| (p_c (4 + |x_c - m| + G_e + absorbed_e + sum_j p_j |x_j - m| + G_q) + q_c + 2^-125)
//           + 2 |grad|
// p's relative error: x_c - m's rounding carried through exp (|x_c - m|), exp's and the division's
// own (2), the fp32 sum of exp's growth (G_e, absorbed terms, as cross_entropy's forward), an online
// kernel's rescales (the mean spread sum p|x - m|); a decomposition's fp32 sum of -k q over the row
// (G_q = C - 1 with smoothing: its C - 1 equal terms each rounded at a partial sum near |k|, 0
// without); q's and k's roundings (q_c, 2|grad|); p below
// fp32's normal range off by its subnormal spacing (2^-149 = 2^-125 u); 2|k| where that reaches a
// quarter of fp32's range (the intermediates k q and their sum may overflow: indeterminate). And
//   c_in = |k| (p_c (|log p_c| + 1) + q_c)
// for PyTorch's decomposition, which stores log_softmax in the input dtype (its exp carries the
// rounding of log p) and the upstream gradient of log p, -k q, in the dtype too (its sum, -k, into
// every p_c); where -k q is below the dtype's normal range, its stored value is off by up to half a
// subnormal spacing, and p_c carries C of those: + p_c * (terms below normal) * spacing / 2.
Result<CeArgs> ceb_args(const RefContext& ctx) {
  GPUEMU_TRY(CeArgs a, ce_args(ctx));
  const RefArg& go = ctx.input("grad_out");
  if (a.reduction == Reduction::none) {
    if (go.shape != Shape{a.rows})
      return make_error(ErrorCode::shape_mismatch,
                        "cross_entropy_backward: reduction 'none' takes one upstream gradient per row, grad_out [N] = [" +
                            std::to_string(a.rows) + "], got " + shape_to_string(go.shape));
  } else if (go.numel() != 1) {
    return make_error(ErrorCode::shape_mismatch, "cross_entropy_backward: grad_out must be a scalar for reduction 'mean' or "
                                                 "'sum' ('none' takes one per row), got " + shape_to_string(go.shape));
  }
  return a;
}

std::int64_t ceb_count(const CeArgs& a) {
  std::int64_t n = 0;
  for (auto t : a.target) n += t >= 0;
  return n;
}

// Each row's scale k_i of p - q, in fp64: g / n ('mean', n the rows not ignored), g ('sum'),
// grad_out[i] ('none').
std::vector<double> ceb_scales(const CeArgs& a, const RefArg& go) {
  if (a.reduction == Reduction::none) return {go.data.begin(), go.data.begin() + a.rows};
  const double g = go.data[0];
  return std::vector<double>(static_cast<std::size_t>(a.rows),
                             a.reduction == Reduction::mean ? g / static_cast<double>(ceb_count(a)) : g);
}

Result<std::vector<RefOutput>> ceb_reference(const RefContext& ctx) {
  GPUEMU_TRY(CeArgs a, ceb_args(ctx));
  const RefArg& logits = ctx.input("logits");
  const RefArg& go = ctx.input("grad_out");
  const std::int64_t count = ceb_count(a), C = a.classes;
  const std::vector<double> ks = ceb_scales(a, go);
  const double classes = static_cast<double>(C), s = a.smoothing;
  const std::int64_t n = a.rows * C;
  // The decomposition's -k q stored in the input dtype below its normal range is off by up to half
  // a subnormal spacing each, and the C - 1 equal ones off alike: their sum, which every p_c
  // multiplies, by that many half spacings (in units of the input dtype's roundoff, as c_in counts).
  const DTypeInfo& in_info = dtype_info(logits.dtype);
  const double half_sub = in_info.min_subnormal / 2.0 / in_info.unit_roundoff;
  const auto sub_terms_of = [&](double k) {
    return (s > 0.0 && std::fabs(k * s / classes) < in_info.min_normal ? classes - 1.0 : 0.0) +
           (std::fabs(k * (1.0 - s + s / classes)) < in_info.min_normal ? 1.0 : 0.0);
  };
  // A decomposition sums the upstream gradient of log p, -k q, over the row in fp32 (log_softmax's
  // backward), and every p_c multiplies that sum. With smoothing its C terms are the target's
  // k (1 - s + s / C) and C - 1 equal k s / C: a running sum adds each small term to a partial sum
  // near |k| and rounds there, the same way every time (the terms and the partial sum's binade do
  // not change), so the C - 1 roundings add up to (C - 1) u |k| (SumGrowth's spread heuristic sees
  // one large term among small ones and would say sqrt(C): a sequential fp32 loop erred by 6.4 of
  // the bound with it, tests/cpp/ops_a_loss_test.cpp). Without smoothing one term is nonzero: exact.
  const double q_sum_growth = s > 0.0 && C > 1 ? classes - 1.0 : 0.0;
  RefVec value = uninit_output(n), c_acc, c_in;
  std::vector<std::uint8_t> alt;
  if (!ctx.value_only) {
    c_acc = uninit_output(n);
    c_in = uninit_output(n);
  }
  // A row torch's decomposition turns into NaN although its gradient is 0: an ignored row whose
  // logits are not all finite (exp(log_softmax) * 0), every row when 'mean' has nothing to divide by
  // (k = g / 0 times the zero mask); a fused kernel that skips those rows returns the 0.
  const bool nothing_counted = a.reduction == Reduction::mean && count == 0;
  std::vector<char> nan_ok(static_cast<std::size_t>(a.rows), 0);
  for (std::int64_t r = 0; r < a.rows; ++r)
    if (a.target[static_cast<std::size_t>(r)] < 0)
      nan_ok[static_cast<std::size_t>(r)] = nothing_counted || !all_finite(logits.data.data() + r * C, C);
  parallel_for(
      a.rows,
      [&](std::int64_t rb, std::int64_t re) {
        for (std::int64_t r = rb; r < re; ++r) {
          const std::int64_t t = a.target[static_cast<std::size_t>(r)];
          const double k = ks[static_cast<std::size_t>(r)];
          const double* x = logits.data.data() + r * C;
          double* v = value.data() + r * C;
          if (t < 0) {
            std::fill(v, v + C, 0.0);
            if (!ctx.value_only) {
              std::fill(c_acc.data() + r * C, c_acc.data() + (r + 1) * C, 0.0);
              std::fill(c_in.data() + r * C, c_in.data() + (r + 1) * C, 0.0);
            }
            continue;
          }
          double m = -std::numeric_limits<double>::infinity();
          bool nan = false;
          for (std::int64_t c = 0; c < C; ++c) nan |= std::isnan(x[c]), m = std::max(m, x[c]);
          if (nan) m = k_nan;
          double sum_e = 0.0, spread = 0.0;
          SumGrowth grow_e;
          for (std::int64_t c = 0; c < C; ++c) {
            const double e = std::exp(x[c] - m);
            sum_e += e;
            grow_e.add(e);
            if (e > 0.0) spread += e * std::fabs(x[c] - m);
          }
          const double lim = std::log(2.0 * 0x1p-24 * sum_e);
          const double absorbed_e = ctx.value_only || !finite(sum_e)
                                        ? 0.0
                                        : SumGrowth::absorbed(C, sum_e, [&](std::int64_t c) {
                                            const double d = x[c] - m;
                                            return d > lim ? std::numeric_limits<double>::infinity() : std::exp(d);
                                          });
          const double rel = 4.0 + grow_e.growth(classes) + absorbed_e + spread / sum_e;
          const double sub_terms = sub_terms_of(k);
          for (std::int64_t c = 0; c < C; ++c) {
            const double p = std::exp(x[c] - m) / sum_e;
            const double q = (c == t ? 1.0 - s : 0.0) + s / classes;
            v[c] = k * (p - q);
            if (ctx.value_only) continue;
            const double ak = std::fabs(k);
            c_acc[r * C + c] = ak * (p * (rel + std::fabs(x[c] - m) + q_sum_growth) + q + 0x1p-125) + 2.0 * std::fabs(v[c]);
            c_in[r * C + c] = ak * (p * ((p > 0.0 ? std::fabs(std::log(p)) : 0.0) + 1.0) + q) + p * sub_terms * half_sub;
            if (!finite(c_acc[r * C + c])) c_acc[r * C + c] = 0.0;
            // The fp32 intermediates reach |k| (k q, a decomposition's sum of -k q, p times it):
            // near fp32's range they may overflow, and any result is then indeterminate.
            c_acc[r * C + c] = overflow_guard(c_acc[r * C + c], 2.0 * ak);
            if (!finite(c_in[r * C + c])) c_in[r * C + c] = 0.0;
          }
        }
      },
      std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(C, 1)));
  if (!ctx.value_only && a.reduction != Reduction::none && !finite(go.data[0])) {
    // An infinite (or NaN) upstream gradient: k (p - q) is +-Inf where p != q, NaN where they are
    // equal, and a decomposition that sums -k q first gets Inf - Inf: any non-finite value is right.
    alt.assign(static_cast<std::size_t>(n), k_alt_any_nonfinite);
  } else if (!ctx.value_only)
    for (std::int64_t r = 0; r < a.rows; ++r) {
      // 'none': a row's own non-finite upstream gradient, as the scalar's above for that row (an
      // ignored row's gradient is 0 in torch, which skips it; g_i times the masked 0 is NaN).
      const bool any = a.reduction == Reduction::none && !finite(ks[static_cast<std::size_t>(r)]);
      if (!any && !nan_ok[static_cast<std::size_t>(r)]) continue;
      if (alt.empty()) alt.assign(static_cast<std::size_t>(n), 0);
      std::fill(alt.begin() + r * C, alt.begin() + (r + 1) * C, any ? k_alt_any_nonfinite : k_alt_nan);
    }
  auto out = single_output(ctx.output_dtype(), logits.shape, std::move(value), std::move(c_acc), std::move(c_in));
  out[0].name = "grad_logits";
  out[0].alt_nonfinite = std::move(alt);
  return out;
}

enum class CebVariant {
  fused,           // control: per row max, fp32 tiled sum of exp, p - q, times k
  online,          // control: online max and sum over 128-wide tiles with the rescale
  log_softmax,     // control: PyTorch's decomposition, log_softmax and d(log p) stored in the dtype
  ignore_counted,  // bug: 'mean' divides by N, counting ignored rows
  ignored_live,    // bug: ignored rows get k * p (their gradient is not masked)
  no_smoothing,    // bug: q is the one-hot target whatever label_smoothing says
  lowp_sum,        // bug: the sum of exp kept in the input dtype
  tail_dropped,    // bug: the sum of exp over C // 1024 full tiles only
  grad_out_row0,   // bug: 'none' scales every row by grad_out[0] (a scalar kernel's load)
};

KernelFn ceb_kernel(CebVariant v) {
  return [v](const RefContext& ctx) -> Result<KernelOutputs> {
    GPUEMU_TRY(CeArgs a, ceb_args(ctx));
    const RefArg& logits = ctx.input("logits");
    const RefArg& go = ctx.input("grad_out");
    const DType dt = logits.dtype, od = ctx.output_dtype();
    const std::int64_t C = a.classes;
    const std::int64_t count = v == CebVariant::ignore_counted ? a.rows : ceb_count(a);
    // Row r's scale: the scalar's, g / count ('mean') or g ('sum'), or grad_out[r] ('none').
    const float g = f32(go.data[0]);
    const float k_scalar = a.reduction == Reduction::mean ? g / static_cast<float>(count) : g;
    const auto k_of = [&](std::int64_t r) {
      if (a.reduction != Reduction::none) return k_scalar;
      return f32(go.data[static_cast<std::size_t>(v == CebVariant::grad_out_row0 ? 0 : r)]);
    };
    const float s = v == CebVariant::no_smoothing ? 0.0f : f32(a.smoothing), classes = static_cast<float>(C);
    std::vector<double> out(static_cast<std::size_t>(a.rows * C), 0.0);
    parallel_for(
        a.rows,
        [&](std::int64_t rb, std::int64_t re) {
          std::vector<float> x(static_cast<std::size_t>(C));
          for (std::int64_t r = rb; r < re; ++r) {
            std::int64_t t = a.target[static_cast<std::size_t>(r)];
            if (t < 0 && v != CebVariant::ignored_live) continue;
            const float k = k_of(r);
            for (std::int64_t c = 0; c < C; ++c) x[static_cast<std::size_t>(c)] = f32(logits.data[static_cast<std::size_t>(r * C + c)]);
            const float* xp = x.data();
            float m = -k_inf_f;
            for (std::int64_t c = 0; c < C; ++c) m = std::isnan(xp[c]) || xp[c] > m ? xp[c] : m;
            float sum = 0.0f;
            if (v == CebVariant::online) {
              constexpr std::int64_t block = 128;
              float run_m = -k_inf_f;
              for (std::int64_t b = 0; b < C; b += block) {
                float tm = -k_inf_f;
                for (std::int64_t c = b; c < std::min(C, b + block); ++c) tm = std::isnan(xp[c]) || xp[c] > tm ? xp[c] : tm;
                const float m_new = std::isnan(tm) || tm > run_m ? tm : run_m;
                float ts = 0.0f;
                for (std::int64_t c = b; c < std::min(C, b + block); ++c) ts += std::exp(xp[c] - m_new);
                sum = (sum == 0.0f ? 0.0f : sum * std::exp(run_m - m_new)) + ts;
                run_m = m_new;
              }
              m = run_m;
            } else {
              const RowSum how = v == CebVariant::lowp_sum ? RowSum::lowp
                                 : v == CebVariant::tail_dropped ? RowSum::tail_dropped
                                                                  : RowSum::tiled;
              sum = row_sum(C, how, 1024, dt, [&](std::int64_t c) { return std::exp(xp[c] - m); });
            }
            double* o = out.data() + r * C;
            const auto q_of = [&](std::int64_t c) { return (c == t ? 1.0f - s : 0.0f) + s / classes; };
            if (t < 0) t = -1;  // ignored_live: no one-hot
            if (v == CebVariant::log_softmax) {
              // log p stored in the dtype; nll_loss's (and the smoothing term's) gradient of log p,
              // -k q, stored in the dtype; then log_softmax's backward gl - exp(log p) * sum(gl).
              const float log_sum = std::log(sum);
              std::vector<float> gl(static_cast<std::size_t>(C));
              for (std::int64_t c = 0; c < C; ++c) gl[static_cast<std::size_t>(c)] = store_as(dt, -k * q_of(c));
              float sg = 0.0f;  // one running fp32 sum, as a CPU loop forms it
              for (std::int64_t c = 0; c < C; ++c) sg += gl[static_cast<std::size_t>(c)];
              for (std::int64_t c = 0; c < C; ++c)
                o[c] = round_to(od, static_cast<double>(gl[static_cast<std::size_t>(c)] - std::exp(store_as(dt, (xp[c] - m) - log_sum)) * sg));
              continue;
            }
            for (std::int64_t c = 0; c < C; ++c) {
              const float p = std::exp(xp[c] - m) / sum;
              o[c] = round_to(od, static_cast<double>(k * (p - q_of(c))));
            }
          }
        },
        std::max<std::int64_t>(1, (1 << 13) / std::max<std::int64_t>(C, 1)));
    return KernelOutputs{std::move(out)};
  };
}

BuiltinOp cross_entropy_backward_op() {
  BuiltinOp op;
  op.name = "cross_entropy_backward";
  op.reference = ceb_reference;
  op.controls = {
      {"fused_fp32", "per row: max, fp32 tiled sum of exp(x - max), k * (p - q)", ceb_kernel(CebVariant::fused)},
      {"online_fp32", "online max and sum over 128-wide tiles with the rescale, then k * (p - q)",
       ceb_kernel(CebVariant::online)},
      {"log_softmax_rounded",
       "PyTorch's decomposition: log_softmax and nll_loss's gradient stored in the input dtype, then "
       "log_softmax's backward",
       ceb_kernel(CebVariant::log_softmax)},
  };
  op.buggy = {
      {"ignore_counted_in_mean", "'mean' divides by N, counting ignored rows", ceb_kernel(CebVariant::ignore_counted)},
      {"ignored_rows_live", "ignored rows get k * p: their gradient is not masked to 0",
       ceb_kernel(CebVariant::ignored_live)},
      {"smoothing_ignored", "q is the one-hot target whatever label_smoothing is", ceb_kernel(CebVariant::no_smoothing)},
      {"lowp_sum", "the sum of exp(x - max) is kept in the input dtype", ceb_kernel(CebVariant::lowp_sum)},
      {"tail_tile_dropped", "the sum of exp over C // 1024 full tiles: the partial last tile is never added",
       ceb_kernel(CebVariant::tail_dropped)},
      {"grad_out_row0", "reduction 'none': every row scaled by grad_out[0], a scalar kernel's load of the upstream gradient",
       ceb_kernel(CebVariant::grad_out_row0)},
  };
  return op;
}

// ---- embedding ---------------------------------------------------------------------------------

struct EmbArgs {
  std::int64_t vocab = 0, dim = 0;
  Shape out_shape;
  std::vector<std::int64_t> index;
};

Result<EmbArgs> emb_args(const RefContext& ctx) {
  const RefArg& w = ctx.input("weight");
  const RefArg& idx = ctx.input("indices");
  if (w.shape.size() != 2) return make_error(ErrorCode::shape_mismatch, "weight must be [V, D]");
  EmbArgs a;
  a.vocab = w.shape[0];
  a.dim = w.shape[1];
  a.out_shape = idx.shape;
  a.out_shape.push_back(a.dim);
  a.index.resize(idx.data.size());
  for (std::size_t i = 0; i < idx.data.size(); ++i) {
    const double v = idx.data[i];
    const auto vi = static_cast<std::int64_t>(v);
    if (static_cast<double>(vi) != v || vi < 0 || vi >= a.vocab)
      return make_error(
          ErrorCode::invalid_argument,
          "index " + std::to_string(v) + " is outside [0, " + std::to_string(a.vocab) + ")");
    a.index[i] = vi;
  }
  return a;
}

enum class EmbVariant { gather, fp32_staging, bounds_off_by_one, tail_dropped, fp16_staging };

// The gather; `v` selects how each row is copied. Shared by the reference (EmbVariant::gather,
// into a RefVec) and the kernels (into their std::vector<double>).
template <class Vec>
Result<Vec> embedding_gather(const RefContext& ctx, const EmbArgs& a, EmbVariant v, DType od) {
  const RefArg& w = ctx.input("weight");
  constexpr std::int64_t block = 128;
  const std::int64_t copied = v == EmbVariant::tail_dropped ? a.dim / block * block : a.dim;
  Vec out(a.index.size() * static_cast<std::size_t>(a.dim), 0.0);
  parallel_for(
      static_cast<std::int64_t>(a.index.size()),
      [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const std::int64_t row = a.index[static_cast<std::size_t>(i)];
          if (v == EmbVariant::bounds_off_by_one && row >= a.vocab - 1)
            continue;  // mask `idx < V - 1`
          for (std::int64_t d = 0; d < copied; ++d) {
            double val = w.data[static_cast<std::size_t>(row * a.dim + d)];
            if (v == EmbVariant::fp32_staging) val = static_cast<double>(f32(val));
            if (v == EmbVariant::fp16_staging) val = round_to(DType::float16, val);
            out[static_cast<std::size_t>(i * a.dim + d)] =
                v == EmbVariant::gather ? val : round_to(od, val);
          }
        }
      },
      std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(a.dim, 1)));
  return out;
}

KernelFn embedding_kernel(EmbVariant v) {
  return [v](const RefContext& ctx) -> Result<KernelOutputs> {
    GPUEMU_TRY(EmbArgs a, emb_args(ctx));
    GPUEMU_TRY(std::vector<double> out,
               embedding_gather<std::vector<double>>(ctx, a, v, ctx.output_dtype()));
    return KernelOutputs{std::move(out)};
  };
}

BuiltinOp embedding_op() {
  BuiltinOp op;
  op.name = "embedding";
  op.reference = exact_reference([](const RefContext& ctx) -> Result<std::vector<RefOutput>> {
    GPUEMU_TRY(EmbArgs a, emb_args(ctx));
    GPUEMU_TRY(RefVec out,
               embedding_gather<RefVec>(ctx, a, EmbVariant::gather, ctx.output_dtype()));
    return single_output(ctx.output_dtype(), a.out_shape, std::move(out));
  });
  op.controls = {
      {"gather_copy", "each output row copied from weight[index]",
       embedding_kernel(EmbVariant::gather)},
      {"fp32_staging", "rows loaded into fp32 registers and stored back",
       embedding_kernel(EmbVariant::fp32_staging)},
  };
  op.buggy = {
      {"bounds_off_by_one", "masks with idx < V - 1: the last row of the table reads as zeros",
       embedding_kernel(EmbVariant::bounds_off_by_one)},
      {"tail_tile_dropped",
       "copies D in 128-wide tiles, D // 128 of them: the partial tail tile stays zero",
       embedding_kernel(EmbVariant::tail_dropped)},
      {"fp16_staging",
       "rows staged through a float16 buffer: loses fp32 precision, overflows bf16 past 65504",
       embedding_kernel(EmbVariant::fp16_staging)},
  };
  return op;
}

// ---- embedding_backward ------------------------------------------------------------------------
// The gradient of F.embedding(indices, weight), a scatter-add of grad_out's
// rows into grad_weight[num_weights, D]: grad_weight[v] = sum of grad_out[p] over the positions p
// whose index is v. Repeated indices accumulate; rows no index names are 0.
//
// Error model (docs/error-model.md): each element is an fp32 sum over the positions naming its
// row, in whatever order a kernel adds them (a sorted segment sum, per-block partials, atomics in
// any order): sum's own term, c_acc = sum|g| * (G(count) + absorbed) with SumGrowth's correlated
// growth for equal terms (a constant or one-hot upstream gradient repeated at one index), G at
// least the growth of repeated values (repeat_growth: an expanded grad_out repeats its values
// along a dim, and a running sum's roundings repeat with them), and overflow_guard where sum|g|
// may leave fp32's range.
// Controls: a sorted segment sum (PyTorch's CPU kernel sorts the indices), per-block partials of
// 128 positions added in reverse block order (atomics of block partials), one atomic add per
// position in a scrambled order. Bugs: the last write wins for repeated indices (a store where an
// atomic add belongs: lost updates), the accumulator a 16-bit variable (atomics on a bf16/fp16
// grad_weight; bf16 for fp32 cases), D copied in 128-wide tiles with the partial last tile lost.


// The scatter's geometry: positions p in [0, P) with their row index, D features each.
struct EmbBackArgs {
  std::int64_t vocab = 0, dim = 0, positions = 0;
  std::vector<std::int64_t> index;
  std::vector<std::vector<std::int64_t>> rows;  // per row v, the positions naming it, ascending
};

Result<EmbBackArgs> emb_back_args(const RefContext& ctx) {
  const RefArg& g = ctx.input("grad_out");
  const RefArg& idx = ctx.input("indices");
  if (!ctx.attrs.contains("num_weights") || !ctx.attrs["num_weights"].is_number_integer())
    return make_error(ErrorCode::invalid_argument, "embedding_backward: num_weights (an int) is required");
  EmbBackArgs a;
  a.vocab = ctx.attr_int("num_weights");
  if (a.vocab < 1) return make_error(ErrorCode::invalid_argument, "embedding_backward: num_weights must be >= 1");
  Shape lead(g.shape.begin(), g.shape.end() - (g.shape.empty() ? 0 : 1));
  if (g.shape.empty() || lead != idx.shape)
    return make_error(ErrorCode::shape_mismatch, "embedding_backward: grad_out " + shape_to_string(g.shape) +
                                                     " must be indices' shape " + shape_to_string(idx.shape) + " + [D]");
  a.dim = g.shape.back();
  a.positions = static_cast<std::int64_t>(idx.data.size());
  a.index.resize(idx.data.size());
  a.rows.resize(static_cast<std::size_t>(a.vocab));
  for (std::size_t p = 0; p < idx.data.size(); ++p) {
    const double v = idx.data[p];
    const auto vi = static_cast<std::int64_t>(v);
    if (static_cast<double>(vi) != v || vi < 0 || vi >= a.vocab)
      return make_error(ErrorCode::invalid_argument,
                        "index " + std::to_string(v) + " is outside [0, " + std::to_string(a.vocab) + ")");
    a.index[p] = vi;
    a.rows[static_cast<std::size_t>(vi)].push_back(static_cast<std::int64_t>(p));
  }
  return a;
}

Result<std::vector<RefOutput>> embedding_backward_reference(const RefContext& ctx) {
  GPUEMU_TRY(EmbBackArgs a, emb_back_args(ctx));
  const RefArg& g = ctx.input("grad_out");
  const std::int64_t n = a.vocab * a.dim;
  RefVec out = output_buffer(n), c_acc = output_buffer(n);
  parallel_for(a.vocab, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t v = b; v < e; ++v) {
      const auto& ps = a.rows[static_cast<std::size_t>(v)];
      if (ps.empty()) continue;  // 0, exactly
      const auto count = static_cast<std::int64_t>(ps.size());
      for (std::int64_t d = 0; d < a.dim; ++d) {
        auto term = [&](std::int64_t k) { return g.data[static_cast<std::size_t>(ps[static_cast<std::size_t>(k)] * a.dim + d)]; };
        double s = 0.0;
        SumGrowth grow;
        for (std::int64_t k = 0; k < count; ++k) s += term(k), grow.add(term(k));
        const double m = grow.abs_sum();
        // grad_out's values repeat (an expanded layout, a constant upstream gradient): a running
        // sum's roundings repeat with them (repeat_growth, as logsumexp's sum counts them)
        const double growth = std::max(grow.growth(static_cast<double>(count)), SumGrowth::repeat_growth(count, term));
        const double c = m * (growth + SumGrowth::absorbed(count, m, term));
        const auto i = static_cast<std::size_t>(v * a.dim + d);
        out[i] = s;
        c_acc[i] = std::isfinite(s) && std::isfinite(c) ? overflow_guard(c, m) : 0.0;
      }
    }
  });
  return single_output(ctx.output_dtype(), {a.vocab, a.dim}, std::move(out), std::move(c_acc));
}

enum class ScatterVariant {
  sorted_segments,  // indices sorted (stable), each row's segment summed in fp32 in position order
  block_partials,   // per-block partials of 128 positions in fp32, added in reverse block order
  atomic_scrambled,  // one fp32 atomic add per position, in a scrambled order
  last_write_wins,  // bug: a store where an atomic add belongs: a repeated index keeps one position
  lowp_acc,         // bug: the accumulator a 16-bit variable (the case dtype, bf16 for fp32)
  tail_dropped,     // bug: D in 128-wide tiles, D / 128 of them: the partial last tile never added
};

KernelFn embedding_backward_kernel(ScatterVariant v) {
  return [v](const RefContext& ctx) -> Result<KernelOutputs> {
    GPUEMU_TRY(EmbBackArgs a, emb_back_args(ctx));
    const RefArg& g = ctx.input("grad_out");
    const DType low = ctx.case_dtype == DType::float16 || ctx.case_dtype == DType::bfloat16 ? ctx.case_dtype : DType::bfloat16;
    std::vector<float> acc(static_cast<std::size_t>(a.vocab * a.dim), 0.0f);
    const std::int64_t dims = v == ScatterVariant::tail_dropped ? a.dim / 128 * 128 : a.dim;
    auto add_position = [&](std::int64_t p, std::vector<float>& into) {
      const std::int64_t row = a.index[static_cast<std::size_t>(p)];
      for (std::int64_t d = 0; d < dims; ++d) {
        float& slot = into[static_cast<std::size_t>(row * a.dim + d)];
        const float t = f32(g.data[static_cast<std::size_t>(p * a.dim + d)]);
        if (v == ScatterVariant::last_write_wins) slot = t;
        else if (v == ScatterVariant::lowp_acc) slot = store_as(low, slot + t);
        else slot += t;
      }
    };
    if (v == ScatterVariant::sorted_segments) {
      for (std::int64_t row = 0; row < a.vocab; ++row)
        for (std::int64_t p : a.rows[static_cast<std::size_t>(row)]) add_position(p, acc);
    } else if (v == ScatterVariant::block_partials) {
      constexpr std::int64_t block = 128;
      const std::int64_t blocks = (a.positions + block - 1) / block;
      std::vector<float> part(acc.size());
      for (std::int64_t b = blocks - 1; b >= 0; --b) {
        std::fill(part.begin(), part.end(), 0.0f);
        std::vector<char> touched(static_cast<std::size_t>(a.vocab), 0);
        for (std::int64_t p = b * block; p < std::min(a.positions, (b + 1) * block); ++p) {
          add_position(p, part);
          touched[static_cast<std::size_t>(a.index[static_cast<std::size_t>(p)])] = 1;
        }
        for (std::int64_t row = 0; row < a.vocab; ++row)
          if (touched[static_cast<std::size_t>(row)])
            for (std::int64_t d = 0; d < a.dim; ++d)
              acc[static_cast<std::size_t>(row * a.dim + d)] += part[static_cast<std::size_t>(row * a.dim + d)];
      }
    } else {
      // A fixed scramble of the positions (atomics land in any order): a stride coprime to P.
      std::int64_t stride = a.positions > 2 ? a.positions / 2 + 1 : 1;
      while (std::gcd(stride, a.positions) != 1) ++stride;
      for (std::int64_t k = 0; k < a.positions; ++k) add_position((k * stride) % a.positions, acc);
    }
    std::vector<double> out(acc.begin(), acc.end());
    return KernelOutputs{round_all(ctx.output_dtype(), std::move(out))};
  };
}

BuiltinOp embedding_backward_op() {
  BuiltinOp op;
  op.name = "embedding_backward";
  op.reference = embedding_backward_reference;
  op.controls = {
      {"sorted_segments", "indices sorted, each row's positions summed in fp32 (PyTorch's CPU kernel's order)",
       embedding_backward_kernel(ScatterVariant::sorted_segments)},
      {"block_partials", "fp32 partials per block of 128 positions, added to grad_weight block by block",
       embedding_backward_kernel(ScatterVariant::block_partials)},
      {"atomic_scrambled", "one fp32 atomic add per position, in a scrambled order",
       embedding_backward_kernel(ScatterVariant::atomic_scrambled)},
  };
  op.buggy = {
      {"last_write_wins", "grad_weight[idx] = g (a store where an atomic add belongs): repeated indices lose updates",
       embedding_backward_kernel(ScatterVariant::last_write_wins)},
      {"lowp_acc", "grad_weight accumulated in a 16-bit variable (atomics on the case dtype; bf16 for fp32)",
       embedding_backward_kernel(ScatterVariant::lowp_acc)},
      {"tail_tile_dropped", "D in 128-wide tiles, D // 128 of them: the partial last tile is never added",
       embedding_backward_kernel(ScatterVariant::tail_dropped)},
  };
  return op;
}

}  // namespace

void register_loss_ops(BuiltinRegistry& r) {
  r.add(cross_entropy_op());
  r.add(cross_entropy_backward_op());
  r.add(embedding_op());
  r.add(embedding_backward_op());
}

}  // namespace gpuemu::ops
