// softmax and log_softmax over `dim`: fp64 references, correct fp32 controls (two-pass tiled,
// online), and known-buggy kernels (padded tail leaking into the denominator, no max subtraction,
// online softmax without the rescale); their backward ops (softmax_backward, log_softmax_backward)
// likewise.
#include "core/parallel.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"
#include "ops/vec_exp.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gpuemu::ops {
namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();

// The reference over rows of `len` contiguous doubles, four lanes at a time (vec_exp.hpp), one exp
// per element: softmax stores e = exp(x - max) in `out`, sums it, then divides in place while the
// row is still in cache and writes the condition term; log_softmax only sums. Sums run in four
// lane accumulators, added pairwise at the end of the row (not left to right: the results differ
// from a sequential sum by a few ulps, which is all the order changes). Special values as the
// plain loops: a NaN makes the row NaN; max = -inf (all -inf) or a +inf beside another +inf makes
// x - max NaN; exp(-inf) = 0.
struct SoftmaxRows {
  bool log = false;
  bool bounds = true;  // false: the value alone (RefContext::value_only), c_acc is not written
  std::int64_t len = 0;

  template <Isa I>
  [[gnu::always_inline]] void row(const double* x, double* out, double* c_acc) const {
    const std::int64_t n = len, n4 = n / 4 * 4;
    // Pass 1: the max (NaN skipped as std::max skips it) and whether a NaN is present.
    vd4 mv = splat4(k_neg_inf);
    vu4 nanv = {0, 0, 0, 0};
    for (std::int64_t k = 0; k < n4; k += 4) {
      const vd4 v = load4(x + k);
      nanv |= reinterpret_cast<vu4>(v != v);
      mv = select4(v > mv, v, mv);
    }
    double m = k_neg_inf;
    bool nan = (nanv[0] | nanv[1] | nanv[2] | nanv[3]) != 0;
    for (int l = 0; l < 4; ++l) m = std::max(m, mv[l]);
    for (std::int64_t k = n4; k < n; ++k) {
      nan |= std::isnan(x[k]);
      m = std::max(m, x[k]);
    }
    if (nan) m = std::numeric_limits<double>::quiet_NaN();
    // Pass 2: s = sum exp(x - m), each exp kept in `out` (log_softmax overwrites it in pass 3);
    // log_softmax also sums exp(x - m)·|x - m| (the spread its exp arguments carry).
    vd4 sv = splat4(0.0), wv = splat4(0.0), lov = splat4(1.0);
    double tail = 0.0, wtail = 0.0, lo = 1.0;
    for (std::int64_t k = 0; k < n4; k += 4) {
      const vd4 d = load4(x + k) - m;
      const vd4 e = vexp<I>(d);
      store4(out + k, e);
      if (log && bounds) wv += select4(e > splat4(0.0), e * vabs(d), splat4(0.0));
      sv += e;
      lov = select4(e < lov, e, lov);
    }
    for (std::int64_t k = n4; k < n; ++k) {
      const double e = vexp1(x[k] - m);
      out[k] = e;
      if (log && bounds && e > 0.0) wtail += e * std::fabs(x[k] - m);
      tail += e;
      lo = std::min(lo, e);
    }
    const double s = ((sv[0] + sv[1]) + (sv[2] + sv[3])) + tail;
    if (!bounds) {  // pass 3, the value alone
      const double lse = m + std::log(s);
      elementwise(
          n,
          [&](std::int64_t k) __attribute__((always_inline)) { out[k] = log ? x[k] - lse : out[k] / s; },
          [&](std::int64_t k) __attribute__((always_inline)) {
            store4(out + k, log ? load4(x + k) - lse : load4(out + k) / s);
          });
      return;
    }
    for (int l = 0; l < 4; ++l) lo = std::min(lo, lov[l]);
    // The sum's growth: sqrt(N), or more over near-equal terms (exp(x - max) in [lo, 1]: SumGrowth)
    // or repeated ones (the exp terms repeat where the logits do, exp being monotone: a row of
    // equal logits beside one dominant one, a low-precision row: repeat_growth), plus the terms
    // within an ulp or two of the sum (absorbed: most of a row far below its max).
    const double root =
        std::max(SumGrowth::growth(static_cast<double>(n), s / static_cast<double>(n), 1.0 - lo),
                 SumGrowth::repeat_growth(n, [x](std::int64_t k) { return x[k]; })) +
        SumGrowth::absorbed(n, s, [out](std::int64_t k) { return out[k]; });
    // Pass 3: the value and its condition term.
    if (log) {
      const double lse = m + std::log(s);
      const bool lse_finite = std::isfinite(lse);
      // The fp32 error of log(sum), in u: exp's and log's own rounding (1), the exp arguments'
      // rounding u·|x_j - m| weighted by p_j (Σ p_j|x_j - m| <= ln N), the sum of N positive
      // terms (sqrt N, as softmax's term); plus |max| and |lse| for the subtractions.
      const double spread = (((wv[0] + wv[1]) + (wv[2] + wv[3])) + wtail) / s;
      const double row_term = std::fabs(m) + std::fabs(lse) + 1.0 + root + (std::isfinite(spread) ? spread : 0.0);
      elementwise(
          n,
          [&](std::int64_t k) __attribute__((always_inline)) {
            out[k] = x[k] - lse;
            c_acc[k] = lse_finite && std::isfinite(x[k]) ? std::fabs(x[k]) + row_term : 0.0;
          },
          [&](std::int64_t k) __attribute__((always_inline)) {
            const vd4 v = load4(x + k), av = vabs(v);
            const vd4 c = av + row_term;
            store4(out + k, v - lse);
            store4(c_acc + k, lse_finite ? select4(av < k_inf, c, splat4(0.0)) : splat4(0.0));
          });
      return;
    }
    elementwise(
        n,
        [&](std::int64_t k) __attribute__((always_inline)) {
          const double p = out[k] / s, spread = std::fabs(x[k] - m);
          out[k] = p;
          c_acc[k] = std::isfinite(spread) ? p * (2.0 + spread) * root : 0.0;
        },
        [&](std::int64_t k) __attribute__((always_inline)) {
          const vd4 p = load4(out + k) / s;
          const vd4 spread = vabs(load4(x + k) - m);
          store4(out + k, p);
          store4(c_acc + k, select4(spread < k_inf, p * (2.0 + spread) * root, splat4(0.0)));
        });
  }
};

// Rows [rb, re) of x seen as [outer, len, inner]: contiguous rows in place, strided ones (inner >
// 1) gathered into a scratch row and scattered back.
template <Isa I>
[[gnu::always_inline]] inline void softmax_rows(const SoftmaxRows& rows, const ReduceGeom& g,
                                                const double* x, double* out, double* c_acc,
                                                std::int64_t rb, std::int64_t re) {
  if (g.inner == 1) {
    for (std::int64_t r = rb; r < re; ++r)
      rows.row<I>(x + r * g.len, out + r * g.len, rows.bounds ? c_acc + r * g.len : nullptr);
    return;
  }
  std::vector<double> scratch(static_cast<std::size_t>(3 * g.len));
  double* sx = scratch.data();
  double* so = sx + g.len;
  double* sc = so + g.len;
  for (std::int64_t r = rb; r < re; ++r) {
    const std::int64_t o = r / g.inner, i = r % g.inner;
    for (std::int64_t k = 0; k < g.len; ++k) sx[k] = x[g.index(o, k, i)];
    rows.row<I>(sx, so, sc);
    for (std::int64_t k = 0; k < g.len; ++k) {
      out[g.index(o, k, i)] = so[k];
      if (rows.bounds) c_acc[g.index(o, k, i)] = sc[k];
    }
  }
}

// The same loops compiled for AVX2 and for the baseline; they give bit-identical results.
GPUEMU_TARGET_AVX2 void softmax_rows_avx2(const SoftmaxRows& rows, const ReduceGeom& g,
                                          const double* x, double* out, double* c_acc,
                                          std::int64_t rb, std::int64_t re) {
  softmax_rows<Isa::avx2>(rows, g, x, out, c_acc, rb, re);
}
void softmax_rows_baseline(const SoftmaxRows& rows, const ReduceGeom& g, const double* x,
                           double* out, double* c_acc, std::int64_t rb, std::int64_t re) {
  softmax_rows<Isa::baseline>(rows, g, x, out, c_acc, rb, re);
}

// Reference softmax / log_softmax over `dim` (fp64), with its condition term.
Result<std::vector<RefOutput>> reference(const RefContext& ctx, bool log) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(ReduceGeom g, reduce_geom(x.shape, ctx.attr_int("dim")));
  const std::int64_t n = x.numel();
  // Not zeroed: every element of both is written below. The rows cover every (outer, inner) pair,
  // and each row writes all `len` of its elements, whatever its values (NaN, ±Inf, all -Inf):
  // softmax in passes 2 and 3, log_softmax in pass 3; strided rows scatter all of them back.
  RefVec out = uninit_output(n), c_acc = ctx.value_only ? RefVec{} : uninit_output(n);
  SoftmaxRows rows;
  rows.log = log;
  rows.bounds = !ctx.value_only;
  rows.len = g.len;
  const auto run = cpu_has_avx2() ? softmax_rows_avx2 : softmax_rows_baseline;
  parallel_rows(g.outer * g.inner,
                std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(g.len, 1)),
                [&](std::int64_t b, std::int64_t e) {
                  run(rows, g, x.data.data(), out.data(), c_acc.data(), b, e);
                });
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc));
}

// How the emulated kernels treat one row.
enum class Variant { two_pass, online, tail_leak, no_max, online_no_rescale };

// One row the way a tiled fp32 kernel computes it: inputs are the case dtype's values, all math in
// float, tiles of `block` elements, output rounded to the output dtype by the caller.
void kernel_row(const RefVec& x, const ReduceGeom& g, std::int64_t o, std::int64_t i,
                bool log, Variant variant, std::int64_t block, std::vector<double>& out) {
  const std::int64_t len = g.len;
  const std::int64_t padded = (len + block - 1) / block * block;
  auto load = [&](std::int64_t k) -> float {
    if (k < len) return f32(x[g.index(o, k, i)]);
    // Out-of-range lanes: a correct kernel loads -inf (masked); the tail-leak bug loads 0.
    return variant == Variant::tail_leak ? 0.0f : -std::numeric_limits<float>::infinity();
  };
  float m = -std::numeric_limits<float>::infinity();
  float s = 0.0f;
  if (variant == Variant::online || variant == Variant::online_no_rescale) {
    for (std::int64_t t = 0; t < padded; t += block) {
      float tile_max = -std::numeric_limits<float>::infinity();
      for (std::int64_t k = t; k < t + block; ++k) tile_max = std::max(tile_max, load(k));
      const float m_new = std::max(m, tile_max);
      float tile_sum = 0.0f;
      for (std::int64_t k = t; k < t + block; ++k) {
        float v = load(k);
        if (v != -std::numeric_limits<float>::infinity()) tile_sum += std::exp(v - m_new);
      }
      const float alpha =
          (m == -std::numeric_limits<float>::infinity()) ? 0.0f : std::exp(m - m_new);
      s = (variant == Variant::online ? s * alpha : s) + tile_sum;
      m = m_new;
    }
  } else {
    if (variant != Variant::no_max)
      for (std::int64_t k = 0; k < padded; ++k) m = std::max(m, load(k));
    else
      m = 0.0f;
    for (std::int64_t t = 0; t < padded; t += block) {
      float tile_sum = 0.0f;
      for (std::int64_t k = t; k < t + block; ++k) {
        float v = load(k);
        if (v != -std::numeric_limits<float>::infinity()) tile_sum += std::exp(v - m);
      }
      s += tile_sum;
    }
  }
  const float log_s = std::log(s);
  for (std::int64_t k = 0; k < len; ++k) {
    const float v = load(k);
    out[g.index(o, k, i)] =
        log ? static_cast<double>((v - m) - log_s) : static_cast<double>(std::exp(v - m) / s);
  }
}

KernelFn emulated(bool log, Variant variant, std::int64_t block) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    const RefArg& x = ctx.input("x");
    GPUEMU_TRY(ReduceGeom g, reduce_geom(x.shape, ctx.attr_int("dim")));
    std::vector<double> out(static_cast<std::size_t>(x.numel()));
    parallel_for(
        g.outer * g.inner,
        [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t r = b; r < e; ++r)
            kernel_row(x.data, g, r / g.inner, r % g.inner, log, variant, block, out);
        },
        64);
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(), std::move(out))};
  };
}

BuiltinOp make_op(const std::string& name, bool log) {
  BuiltinOp op;
  op.name = name;
  op.reference = [log](const RefContext& ctx) { return reference(ctx, log); };
  op.controls = {
      {"fp32_two_pass", "max pass, then fp32 tile sums of exp(x - max) over 1024-wide tiles",
       emulated(log, Variant::two_pass, 1024)},
      {"fp32_online", "online softmax over 128-wide tiles with the running-sum rescale",
       emulated(log, Variant::online, 128)},
  };
  op.buggy = {
      {"tail_leak",
       "BLOCK=128; the last partial tile loads 0 instead of -inf, so the padding "
       "leaks into the max and the denominator",
       emulated(log, Variant::tail_leak, 128)},
      {"no_max_subtraction", "exp(x) without subtracting the row max: overflows on large logits",
       emulated(log, Variant::no_max, 1024)},
      {"online_no_rescale", "online softmax that forgets s *= exp(m_old - m_new)",
       emulated(log, Variant::online_no_rescale, 128)},
  };
  return op;
}

// ---- Backward: softmax_backward and log_softmax_backward ------------------------------------
//
// softmax:      grad_x_i = y_i * (g_i - s),       s = sum_j g_j * y_j
// log_softmax:  grad_x_i = g_i - exp(y_i) * S,    S = sum_j g_j
// with y the forward's saved output and g = grad_out, both as the kernel receives them. The
// condition terms (docs/error-model.md, "Backward"):
//   softmax:      c_acc_i = |y_i| * (|g_i| + |s| + (1 + G) * A) + |grad_x_i|,  A = sum_j |g_j y_j|
//     the products' rounding (u A) and the fp32 sum's (u G A, G = SumGrowth over the terms |g_j y_j|)
//     carried by y_i; the subtraction's and the product's rounding, in either order
//     (y_i * (g_i - s), or y_i * g_i - y_i * s: |y_i| (|g_i| + |s|) covers both).
//   log_softmax:  c_acc_i = |grad_x_i| + exp(y_i) * ((3 + |y_i|) * |S| + G * B),  B = sum_j |g_j|
//     the sum's error (u G B) times exp(y_i); exp's own rounding, its argument's (an exp through
//     exp2 rounds y * log2(e): u |y| relative), the product's; the subtraction's.
// With the forward's logits x in the case (the optional input "x", present when pinned: autograd's
// backward=True), y is not the kernel's: its forward computed its own y_k from x (rounded to the
// dtype, with the forward's fp32 error) and saved it, or its backward recomputes it. The reference
// is then the exact y = forward(x) in fp64, and the model adds what y_k's deviation dy can move the
// result, with |dy_j| <= u_in * max(|y_j|, min_normal_in) (the output's rounding; half a
// subnormal spacing below the normal range) + u_fp32 * cf_j (the forward's own fp32 term, its
// c_acc: softmax p (2 + |x - m|) G, log_softmax |x| + |m| + |lse| + 1 + G + spread):
//   softmax:      d(grad_x_i) = dy_i (g_i - s) - y_i sum_j g_j dy_j
//                 c_in_i = |g_i - s| yin_i + |y_i| sum_j |g_j| yin_j, c_acc_i the same with cf
//   log_softmax:  d(grad_x_i) = -exp(y_i) (e^{dy_i} - 1) S
//                 c_in_i = e^{y_i} |S| f_i yin_i, c_acc_i the same with cf, f_i = expm1(d)/d at the
//                 whole bound d (all orders: a y of -80 in bf16 is 0.3 nats off)
// (docs/error-model.md, "softmax_backward and log_softmax_backward under autograd").
// A non-finite element has no condition term (its propagation is exact, as the forward's); where
// an fp32 intermediate may overflow, the element is indeterminate (overflow_guard).
struct BackwardRows {
  bool log = false;
  std::int64_t len = 0;
  double u_in = 0.0;         // the case dtype's unit roundoff (y_k's rounding)
  double min_normal = 0.0;   // ... and its smallest normal

  // yc (the forward's c_acc per element) and c_in are null unless the case holds the logits.
  void row(const double* g, const double* y, const double* yc, double* out, double* c_acc,
           double* c_in) const {
    const std::int64_t n = len;
    double s = 0.0, a = 0.0, lo = k_inf, hi = 0.0;
    for (std::int64_t k = 0; k < n; ++k) {
      const double t = log ? g[k] : g[k] * y[k];
      s += t;
      const double at = std::fabs(t);
      a += at;
      lo = std::min(lo, at);
      hi = std::max(hi, at);
    }
    const double growth =
        n > 0 ? SumGrowth::growth(static_cast<double>(n), a / static_cast<double>(n), hi - lo) +
                    SumGrowth::absorbed(n, a, [&](std::int64_t k) { return log ? g[k] : g[k] * y[k]; })
              : 0.0;
    // y_k's deviation per element, in units of u_in (yin) and of u_fp32 (yc), and softmax's
    // sums of |g_j| times them.
    auto y_in = [&](std::int64_t k) {
      return std::isfinite(y[k]) ? std::max(std::fabs(y[k]), min_normal) : 0.0;
    };
    auto y_acc = [&](std::int64_t k) { return std::isfinite(yc[k]) ? yc[k] : 0.0; };
    double gy_in = 0.0, gy_acc = 0.0;
    if (c_in && !log)
      for (std::int64_t k = 0; k < n; ++k) {
        gy_in += std::fabs(g[k]) * y_in(k);
        gy_acc += std::fabs(g[k]) * y_acc(k);
      }
    for (std::int64_t k = 0; k < n; ++k) {
      double v = 0.0, c = 0.0, ci = 0.0, cy = 0.0;  // cy: the saved y's fp32 part (in c_acc)
      if (log) {
        const double p = std::exp(y[k]);
        v = g[k] - p * s;
        // y = -Inf (a probability of 0) carries no error: exp gives exactly 0.
        c = std::fabs(v) + (p > 0.0 ? p * ((3.0 + std::fabs(y[k])) * std::fabs(s) + growth * a) : 0.0);
        if (c_in && p > 0.0) {
          const double yi = y_in(k), ya = y_acc(k);
          const double d = u_in * yi + 0x1p-24 * ya;  // u_fp32
          const double f = d > 0.0 ? std::expm1(d) / d : 1.0;
          ci = p * std::fabs(s) * f * yi;
          cy = p * std::fabs(s) * f * ya;
        }
      } else {
        v = y[k] * (g[k] - s);
        c = std::fabs(y[k]) * (std::fabs(g[k]) + std::fabs(s) + (1.0 + growth) * a) + std::fabs(v);
        if (c_in) {
          const double gs = std::fabs(g[k] - s);
          ci = gs * y_in(k) + std::fabs(y[k]) * gy_in;
          cy = gs * y_acc(k) + std::fabs(y[k]) * gy_acc;
        }
      }
      out[k] = v;
      // Where an fp32 intermediate may overflow (the products and their sum, up to A, or
      // g - s, up to |g| + A), the element is indeterminate (overflow_guard), y = 0 included:
      // 0 * (g - Inf) is NaN in a correct kernel.
      // The saved y's terms grow without bound where the forward's own bound passes fp32's range
      // (boundary logits: y_k may then be anything, expm1 of it Inf): a huge finite term, which
      // the verdict reads as indeterminate for a non-finite output and which any finite one meets.
      auto cap = [](double t) { return std::isnan(t) ? 0.0 : std::min(t, 1e300); };
      const bool finite = std::isfinite(v) && std::isfinite(c);
      c_acc[k] = finite ? std::min(overflow_guard(c, a + std::fabs(g[k])) + cap(cy), 1e300) : 0.0;
      if (c_in) c_in[k] = std::isfinite(v) ? cap(ci) : 0.0;
    }
  }
};

Result<std::vector<RefOutput>> backward_reference(const RefContext& ctx, bool log) {
  const char* op_name = log ? "log_softmax_backward" : "softmax_backward";
  const RefArg& g = ctx.input("grad_out");
  const RefArg& y_given = ctx.input("y");
  if (g.shape != y_given.shape)
    return make_error(ErrorCode::shape_mismatch,
                      std::string(op_name) + ": grad_out " + shape_to_string(g.shape) + " and y " +
                          shape_to_string(y_given.shape) + " must have the same shape");
  const bool from_logits = ctx.has_input("x");
  if (from_logits && ctx.input("x").shape != g.shape)
    return make_error(ErrorCode::shape_mismatch,
                      std::string(op_name) + ": grad_out " + shape_to_string(g.shape) + " and x " +
                          shape_to_string(ctx.input("x").shape) + " must have the same shape");
  GPUEMU_TRY(ReduceGeom geom, reduce_geom(g.shape, ctx.attr_int("dim")));
  // With the logits: the exact forward y = softmax(x) (or log_softmax) and its fp32 term, from the
  // forward's own reference (which reads x and dim from this context).
  RefVec fwd_value, fwd_c_acc;
  if (from_logits) {
    RefContext fctx = ctx;
    fctx.value_only = false;
    GPUEMU_TRY(std::vector<RefOutput> fwd, reference(fctx, log));
    fwd_value = std::move(fwd.front().value);
    fwd_c_acc = std::move(fwd.front().c_acc);
  }
  const RefVec& yv = from_logits ? fwd_value : y_given.data;
  const std::int64_t n = g.numel();
  RefVec out = uninit_output(n), c_acc = uninit_output(n), c_in = from_logits ? uninit_output(n) : RefVec{};
  BackwardRows rows;
  rows.log = log;
  rows.len = geom.len;
  rows.u_in = dtype_info(ctx.case_dtype).unit_roundoff;
  rows.min_normal = dtype_info(ctx.case_dtype).min_normal;
  parallel_rows(geom.outer * geom.inner,
                std::max<std::int64_t>(1, (1 << 14) / std::max<std::int64_t>(geom.len, 1)),
                [&](std::int64_t rb, std::int64_t re) {
                  std::vector<double> sg, sy, syc, so, sc, sci;
                  if (geom.inner > 1) {
                    const auto l = static_cast<std::size_t>(geom.len);
                    sg.resize(l), sy.resize(l), syc.resize(l), so.resize(l), sc.resize(l), sci.resize(l);
                  }
                  for (std::int64_t r = rb; r < re; ++r) {
                    const std::int64_t o = r / geom.inner, i = r % geom.inner;
                    if (geom.inner == 1) {
                      const std::int64_t b = r * geom.len;
                      rows.row(g.data.data() + b, yv.data() + b, from_logits ? fwd_c_acc.data() + b : nullptr,
                               out.data() + b, c_acc.data() + b, from_logits ? c_in.data() + b : nullptr);
                      continue;
                    }
                    for (std::int64_t k = 0; k < geom.len; ++k) {
                      const auto at = static_cast<std::size_t>(geom.index(o, k, i));
                      sg[k] = g.data[at], sy[k] = yv[at];
                      if (from_logits) syc[k] = fwd_c_acc[at];
                    }
                    rows.row(sg.data(), sy.data(), from_logits ? syc.data() : nullptr, so.data(), sc.data(),
                             from_logits ? sci.data() : nullptr);
                    for (std::int64_t k = 0; k < geom.len; ++k) {
                      const auto at = static_cast<std::size_t>(geom.index(o, k, i));
                      out[at] = so[k], c_acc[at] = sc[k];
                      if (from_logits) c_in[at] = sci[k];
                    }
                  }
                });
  return single_output(ctx.output_dtype(), g.shape, std::move(out), std::move(c_acc), std::move(c_in));
}

// How the emulated backward kernels treat one line.
enum class BackwardVariant {
  tiled,           // fp32 tile sums of 1024, grad_x = y * (g - s) (or g - exp(y) * S)
  split,           // fp32, 128-wide tiles, grad_x = y * g - y * s (or g - exp2(y * log2 e) * S)
  tail_leak,       // BLOCK = 128; the last partial tile is not masked: its lanes read the next line
  lowp_sum,        // the sum kept in the case dtype, rounded after every addition
  wrong_formula,   // softmax: s = sum g (log_softmax's); log_softmax: y * (g - sum g y) (softmax's)
};

void backward_line(const RefVec& g, const RefVec& y, const ReduceGeom& geom, std::int64_t o,
                   std::int64_t i, bool log, BackwardVariant variant, DType dtype,
                   std::vector<double>& out) {
  const std::int64_t len = geom.len;
  const std::int64_t block = variant == BackwardVariant::tiled ? 1024 : 128;
  const std::int64_t padded = (len + block - 1) / block * block;
  // Lanes past the end: masked (0) in a correct kernel; the tail-leak bug reads the next line's
  // first elements (0 past the tensor).
  auto load = [&](const RefVec& v, std::int64_t k) -> float {
    if (k < len) return f32(v[static_cast<std::size_t>(geom.index(o, k, i))]);
    if (variant != BackwardVariant::tail_leak) return 0.0f;
    const std::int64_t next = o * geom.inner + i + 1;
    if (next >= geom.outer * geom.inner || k - len >= len) return 0.0f;
    return f32(v[static_cast<std::size_t>(geom.index(next / geom.inner, k - len, next % geom.inner))]);
  };
  const bool wrong = variant == BackwardVariant::wrong_formula;
  const bool weighted_sum = log == wrong;  // s = sum g * y (else sum g)
  const bool softmax_out = !log || wrong;  // y * (g - s) (else g - exp(y) * s)
  float s = 0.0f;
  for (std::int64_t t = 0; t < padded; t += block) {
    float tile = 0.0f;
    for (std::int64_t k = t; k < t + block; ++k) {
      const float gk = load(g, k), yk = load(y, k);
      const float term = weighted_sum ? gk * yk : gk;
      if (variant == BackwardVariant::lowp_sum)
        s = static_cast<float>(round_to(dtype, static_cast<double>(s + term)));
      else
        tile += term;
    }
    if (variant != BackwardVariant::lowp_sum) s += tile;
  }
  for (std::int64_t k = 0; k < len; ++k) {
    const float gk = load(g, k), yk = load(y, k);
    float v = 0.0f;
    if (softmax_out)
      v = variant == BackwardVariant::split ? yk * gk - yk * s : yk * (gk - s);
    else if (variant == BackwardVariant::split)
      v = gk - std::exp2(yk * 1.44269504f) * s;
    else
      v = gk - std::exp(yk) * s;
    out[static_cast<std::size_t>(geom.index(o, k, i))] = static_cast<double>(v);
  }
}

KernelFn backward_emulated(bool log, BackwardVariant variant) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    const RefArg& g = ctx.input("grad_out");
    const RefArg& y = ctx.input("y");
    GPUEMU_TRY(ReduceGeom geom, reduce_geom(g.shape, ctx.attr_int("dim")));
    std::vector<double> out(static_cast<std::size_t>(g.numel()));
    parallel_for(
        geom.outer * geom.inner,
        [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t r = b; r < e; ++r)
            backward_line(g.data, y.data, geom, r / geom.inner, r % geom.inner, log, variant,
                          g.dtype, out);
        },
        64);
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(), std::move(out))};
  };
}

BuiltinOp make_backward_op(const std::string& name, bool log) {
  BuiltinOp op;
  op.name = name;
  op.reference = [log](const RefContext& ctx) { return backward_reference(ctx, log); };
  op.controls = {
      {"fp32_tiled", log ? "fp32 tile sums of grad_out over 1024-wide tiles, grad_out - exp(y) * sum"
                         : "fp32 tile sums of grad_out * y over 1024-wide tiles, y * (grad_out - sum)",
       backward_emulated(log, BackwardVariant::tiled)},
      {"fp32_split", log ? "fp32 over 128-wide tiles, exp(y) as exp2(y * log2 e)"
                         : "fp32 over 128-wide tiles, y * grad_out - y * sum",
       backward_emulated(log, BackwardVariant::split)},
  };
  op.buggy = {
      {"tail_leak",
       "BLOCK=128; the last partial tile of the row sum is not masked and reads the next row's "
       "first elements",
       backward_emulated(log, BackwardVariant::tail_leak)},
      {"lowp_sum", "the row sum kept in the case dtype (bf16/fp16), rounded after every addition",
       backward_emulated(log, BackwardVariant::lowp_sum)},
      {"wrong_formula",
       log ? "softmax's backward applied to log_softmax's output: y * (grad_out - sum(grad_out * y))"
           : "log_softmax's row sum in softmax's backward: y * (grad_out - sum(grad_out))",
       backward_emulated(log, BackwardVariant::wrong_formula)},
  };
  return op;
}

}  // namespace

void register_softmax_ops(BuiltinRegistry& r) {
  r.add(make_op("softmax", false));
  r.add(make_op("log_softmax", true));
  r.add(make_backward_op("softmax_backward", false));
  r.add(make_backward_op("log_softmax_backward", true));
}

}  // namespace gpuemu::ops
