#include "fuzz/values.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpuemu {
namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

std::int64_t last_dim(const Shape& s) { return s.empty() ? 1 : std::max<std::int64_t>(s.back(), 1); }

// A magnitude 2^k with k uniform in [lo, hi] (exact, no libm).
double pow2(Rng& rng, int lo, int hi) { return std::ldexp(1.0, static_cast<int>(rng.integer(lo, hi))); }

bool is_logit_like(const OpSchema& s, const InputSpec& in) {
  if (!in.values.empty()) return in.values == "logits";
  if (s.family == "softmax") return true;
  if (s.family == "attention") return in.name == "q" || in.name == "k" || in.name == "k_cache";
  if (s.family == "loss") return in.name == "logits";
  return s.name == "logsumexp" || s.name == "argmax" || s.name == "amax";
}

bool is_norm_input(const OpSchema& s, const InputSpec& in) {
  if (!in.values.empty()) return in.values == "norm";
  return (s.family == "norm" || s.name == "l2norm") && in.name == "x";
}

bool is_accumulated(const OpSchema& s, const InputSpec& in) {
  if (!in.values.empty()) return in.values == "accumulated";
  return s.family == "gemm" || s.family == "conv" || s.family == "scan" || s.name == "sum" ||
         s.name == "mean" || s.name == "scaled_fp8_matmul";
}

// Largest magnitude to draw for a dtype, keeping headroom for the op's own arithmetic.
double dtype_cap(DType d) {
  const auto& info = dtype_info(d);
  return info.is_floating ? std::min(info.max_finite / 64.0, 1e30) : info.max_finite;
}

void fill_regular(std::vector<double>& v, Rng& rng, double scale) {
  if (rng.chance(1, 3)) {
    for (auto& x : v) x = rng.uniform(-scale, scale);
    return;
  }
  rng.normals(v.data(), v.size());
  for (auto& x : v) x = x * scale;
}

// Logits with a large spread, and a running max that rises late in each row, so that both
// saturation and an online-softmax rescale matter.
void fill_logits(std::vector<double>& v, const Shape& shape, Rng& rng, DType d, bool key_like) {
  const std::int64_t n = last_dim(shape);
  const std::int64_t rows_len = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
  const double spreads[] = {1.0, 4.0, 12.0, 30.0};
  const double spread = std::min(spreads[rng.bounded(4)], dtype_cap(d));
  const int pattern = static_cast<int>(rng.bounded(3));  // 0 plain, 1 ramp, 2 late spike
  const double ramp = spread * (rng.chance(1, 2) ? 2.0 : 6.0);
  // Offsets: none, random, or every logit well below zero (a padded lane loaded as 0 instead of
  // -inf then dominates the max and the denominator).
  double offset = 0.0;
  switch (rng.bounded(4)) {
    case 1: offset = rng.normal() * 8.0 * spread; break;
    case 2: offset = -spread * rng.uniform(4.0, 12.0) - 4.0; break;
    default: break;
  }
  // The draws in index order: in the late-spike pattern a chance() follows the normal of each
  // element of a row's last quarter (normals_then interleaves it: the same stream, the same bits).
  const bool spikes = !key_like && pattern == 2;
  const std::int64_t tail_from = n - std::max<std::int64_t>(n / 4, 1);
  std::vector<unsigned char> spike(spikes ? v.size() : 0);
  if (spikes)
    rng.normals_then(v.data(), v.size(), [&](std::size_t i) {
      spike[i] = static_cast<std::int64_t>(i) % n >= tail_from && rng.chance(1, 16);
    });
  else
    rng.normals(v.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i) % n;
    double x = v[i] * spread + offset;
    if (key_like) {
      // Keys: grow along the sequence dim so later keys give larger scores.
      const auto row = (static_cast<std::int64_t>(i) / n) % std::max<std::int64_t>(rows_len, 1);
      if (pattern != 0) x *= 1.0 + 3.0 * static_cast<double>(row) / static_cast<double>(std::max<std::int64_t>(rows_len, 1));
    } else if (pattern == 1) {
      x += ramp * static_cast<double>(k) / static_cast<double>(n);
    } else if (spikes && spike[i]) {
      x += ramp * 2.0;
    }
    v[i] = x;
  }
  if (key_like) {
    // Queries and keys: a scale on the whole tensor exposes missing 1/sqrt(D) and saturation.
    const double s = pow2(rng, 0, 2);
    for (auto& x : v) x *= s / 2.0;
  }
}

// Tiny variance on a large offset: cancellation in one-pass variance, and eps placement.
void fill_norm(std::vector<double>& v, const Shape& shape, Rng& rng, DType d, bool l2) {
  const std::int64_t n = last_dim(shape);
  const int mant = dtype_info(d).mantissa_bits;
  const double sigmas[] = {1e-3, 3e-3, 1e-2, 1.0, 10.0};
  double sigma = sigmas[rng.bounded(5)];
  // l2norm's eps (1e-12 by default) clamps the norm itself: only rows whose norm nears sqrt(eps)
  // tell eps's placement apart (max(||x||, eps) vs rsqrt(||x||^2 + eps)).
  if (l2 && rng.chance(1, 3)) {
    const double tiny[] = {1e-7, 3e-7, 1e-6};
    sigma = tiny[rng.bounded(3)] / std::sqrt(static_cast<double>(std::max<std::int64_t>(n, 1)));
    rng.normals(v.data(), v.size());
    for (auto& x : v) x = x * sigma;
    return;
  }
  for (std::int64_t r = 0; r * n < static_cast<std::int64_t>(v.size()); ++r) {
    // offset / sigma up to 2^(mantissa-2): the offset stays resolvable in the dtype.
    double offset = rng.chance(1, 4) ? 0.0 : sigma * pow2(rng, 2, std::max(3, mant - 2)) * (rng.chance(1, 2) ? 1 : -1);
    offset = std::clamp(offset, -dtype_cap(d), dtype_cap(d));
    const std::int64_t len = std::min<std::int64_t>(n, static_cast<std::int64_t>(v.size()) - r * n);
    double* row = v.data() + r * n;
    rng.normals(row, static_cast<std::size_t>(len));
    for (std::int64_t k = 0; k < len; ++k) row[k] = offset + row[k] * sigma;
  }
}

// Long sums that outgrow a low-precision accumulator: same-sign values, outliers, mixed signs.
void fill_accumulated(std::vector<double>& v, Rng& rng) {
  switch (rng.bounded(3)) {
    case 0:
      for (auto& x : v) x = rng.uniform(0.5, 1.5);
      break;
    case 1: {  // each normal, then the chance of its outlier
      std::vector<unsigned char> outlier(v.size());
      rng.normals_then(v.data(), v.size(), [&](std::size_t i) { outlier[i] = rng.chance(1, 64); });
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = v[i] * (outlier[i] ? 64.0 : 1.0);
      break;
    }
    default: {
      const double mean = rng.uniform(0.25, 1.0);
      rng.normals(v.data(), v.size());
      for (auto& x : v) x = mean + x * 0.5;
    }
  }
}

// The lines along the op's `dim` attr (default -1) of a row-major tensor: element
// (o * len + k) * inner + i is the k-th of line (o, i).
struct Lines {
  std::int64_t outer = 1, len = 1, inner = 1;
};

Lines lines_along(const Shape& shape, const Json* attrs) {
  Lines l;
  if (shape.empty()) return l;
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::int64_t d = -1;
  if (attrs && attrs->contains("dim") && (*attrs)["dim"].is_number_integer()) d = (*attrs)["dim"].get<std::int64_t>();
  if (d < 0) d += rank;
  d = std::clamp<std::int64_t>(d, 0, rank - 1);
  for (std::int64_t k = 0; k < d; ++k) l.outer *= shape[static_cast<std::size_t>(k)];
  l.len = shape[static_cast<std::size_t>(d)];
  for (std::int64_t k = d + 1; k < rank; ++k) l.inner *= shape[static_cast<std::size_t>(k)];
  return l;
}

// The spacing of dtype d's values at a (a finite, representable in d).
double spacing(DType d, double a) {
  const auto& info = dtype_info(d);
  if (std::fabs(a) < info.min_normal) return info.min_subnormal;
  return std::ldexp(1.0, std::ilogb(a) - info.mantissa_bits);
}

// Sums at the limit of what the output dtype shows (issue 21): one line along the reduced dim, and
// each other line with probability 1/2, hold pairs v, -v + c*ulp(v) (c in [-2, 2], on the dtype's grid) at
// random places, so the line's exact sum is a few input ulps while sum |x| is large. Its condition
// number reaches what the dtype can represent (about sqrt(N) / u_in), so the output's own rounding
// (u_out * |sum|) no longer hides an fp32 accumulator's error (u_fp32 * sum |x| * G(N)): without
// such lines a low-precision output rounded away every fp32-level loss but on the rare case that
// cancelled by chance (power curve: 2-7 % of bfloat16 and float16 cases at the smallest k caught).
void cancel_lines(std::vector<double>& v, const Shape& shape, const Json* attrs, DType d, Rng& rng) {
  const Lines l = lines_along(shape, attrs);
  if (l.len < 2 || v.empty()) return;
  std::vector<std::int64_t> perm(static_cast<std::size_t>(l.len));
  const auto forced = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(l.outer * l.inner)));
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      if (o * l.inner + i != forced && !rng.chance(1, 2)) continue;
      for (std::int64_t k = 0; k < l.len; ++k) perm[static_cast<std::size_t>(k)] = k;
      for (std::int64_t k = l.len - 1; k > 0; --k)  // Fisher-Yates
        std::swap(perm[static_cast<std::size_t>(k)],
                  perm[static_cast<std::size_t>(rng.bounded(static_cast<std::uint64_t>(k) + 1))]);
      const double scale = pow2(rng, -4, 4);
      auto at = [&](std::int64_t k) -> double& {
        return v[static_cast<std::size_t>((o * l.len + perm[static_cast<std::size_t>(k)]) * l.inner + i)];
      };
      for (std::int64_t k = 0; k + 1 < l.len; k += 2) {
        double a = round_to(d, rng.normal() * scale * (rng.chance(1, 16) ? 16.0 : 1.0));
        if (a == 0.0) a = scale;
        at(k) = a;
        at(k + 1) = -a + static_cast<double>(rng.integer(-2, 2)) * spacing(d, a);
      }
      if (l.len % 2 == 1) at(l.len - 1) = 0.0;
    }
}

// Log-sum-exps near 0 (issue 21): one line along the reduced dim, and each other line with
// probability 1/2, shifted by its own log-sum-exp, so they hold log-probabilities. The result is then a few input ulps from 0, and its
// own rounding (u_out * |lse|) no longer hides an fp32 loss in the sum of exponentials (before,
// only rows near 0 by chance showed one: the power curve's float16 logsumexp was caught at k = 2^9
// in 2.8 % of the cases).
void center_log_sum_exp(std::vector<double>& v, const Shape& shape, const Json* attrs, Rng& rng) {
  const Lines l = lines_along(shape, attrs);
  if (v.empty()) return;
  const auto forced = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(l.outer * l.inner)));
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      if (o * l.inner + i != forced && !rng.chance(1, 2)) continue;
      auto at = [&](std::int64_t k) -> double& {
        return v[static_cast<std::size_t>((o * l.len + k) * l.inner + i)];
      };
      double m = -k_inf;
      for (std::int64_t k = 0; k < l.len; ++k) m = std::max(m, at(k));
      if (!std::isfinite(m)) continue;
      double s = 0.0;
      for (std::int64_t k = 0; k < l.len; ++k) s += std::exp(at(k) - m);
      const double lse = m + std::log(s);
      for (std::int64_t k = 0; k < l.len; ++k) at(k) -= lse;
    }
}

// Magnitudes over many octaves: missing scale factors and saturating branches show up.
void fill_wide(std::vector<double>& v, Rng& rng, DType d, bool positive) {
  int cap_exp = 0;
  std::frexp(dtype_cap(d), &cap_exp);
  const int top = std::min(8, cap_exp - 1);
  for (auto& x : v) {
    const double m = rng.uniform(1.0, 2.0) * pow2(rng, -8, top);
    x = positive || rng.chance(1, 2) ? m : -m;
  }
}

// The upstream gradient of a per-row loss (domain "loss_grad" with a shape: cross_entropy's
// reduction 'none') under the adversarial strategy, one pattern per case: sparse (about one row in
// 8 nonzero), one row only (a kernel that scales every row by grad_out[0] or by the sum), constant
// (the 'sum' reduction's, spread over rows: a kernel that uses one value for all rows passes only
// here), or magnitudes over many octaves per row with about one row in 8 exactly 0.
void fill_row_loss_grad(std::vector<double>& v, Rng& rng, DType d) {
  switch (rng.bounded(4)) {
    case 0:
      fill_wide(v, rng, d, false);
      for (auto& x : v)
        if (!rng.chance(1, 8)) x = 0.0;
      break;
    case 1: {
      std::fill(v.begin(), v.end(), 0.0);
      std::vector<double> one(1);
      fill_wide(one, rng, d, false);
      if (!v.empty()) v[rng.bounded(v.size())] = one[0];
      break;
    }
    case 2: {
      std::vector<double> one(1);
      fill_wide(one, rng, d, false);
      std::fill(v.begin(), v.end(), one[0]);
      break;
    }
    default:
      fill_wide(v, rng, d, false);
      for (auto& x : v)
        if (rng.chance(1, 8)) x = 0.0;
  }
}

// The dtype's edges.
void fill_boundary(std::vector<double>& v, Rng& rng, DType d, bool positive, bool nonnegative) {
  const auto& info = dtype_info(d);
  const double edges[] = {info.max_finite, info.min_normal, info.min_subnormal, 0.0, 1.0,
                          1.0 + 2.0 * info.unit_roundoff, 1.0 - info.unit_roundoff,
                          info.max_finite / 2.0, info.min_normal * 3.0};
  for (auto& x : v) {
    double e = rng.chance(1, 3) ? rng.normal() : edges[rng.bounded(9)];
    if (positive && e == 0.0) e = info.min_subnormal;
    if (!positive && !nonnegative && rng.chance(1, 2)) e = -e;
    x = (positive || nonnegative) ? std::fabs(e) : e;
  }
}

// An upstream gradient (domain "grad") under the adversarial strategy, one pattern per case:
// sparse (about one element in 16 nonzero), one-hot along `dim` (one nonzero per line, as
// cross-entropy's gradient of the logits), constant along `dim` (softmax's backward then cancels to
// exactly 0: g - sum(g * y) with sum(y) = 1), or magnitudes over many octaves.
void fill_grad(std::vector<double>& v, const Shape& shape, const Json* attrs, Rng& rng, DType d) {
  const Lines l = lines_along(shape, attrs);
  switch (rng.bounded(4)) {
    case 0:
      for (auto& x : v) x = rng.chance(1, 16) ? rng.normal() * pow2(rng, -4, 4) : 0.0;
      break;
    case 1:
      std::fill(v.begin(), v.end(), 0.0);
      for (std::int64_t o = 0; o < l.outer; ++o)
        for (std::int64_t i = 0; i < l.inner; ++i) {
          if (l.len < 1) break;
          const auto k = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(l.len)));
          v[static_cast<std::size_t>((o * l.len + k) * l.inner + i)] = rng.normal() * pow2(rng, -4, 4);
        }
      break;
    case 2:
      for (std::int64_t o = 0; o < l.outer; ++o)
        for (std::int64_t i = 0; i < l.inner; ++i) {
          const double c = rng.normal() * pow2(rng, -4, 4);
          for (std::int64_t k = 0; k < l.len; ++k) v[static_cast<std::size_t>((o * l.len + k) * l.inner + i)] = c;
        }
      break;
    default:
      fill_wide(v, rng, d, false);
  }
}

// A backward op's saved forward output (domain "saved_softmax" or "saved_log_softmax"): the values drawn as the forward's
// input are replaced, line by line along `dim`, by softmax or log_softmax of them in fp64 (before
// the rounding to the dtype, as a forward kernel's output is rounded once). Special values follow
// torch: a NaN makes its line NaN, an all -Inf line is NaN, a +Inf beside another +Inf gives NaN.
void apply_saved_forward(std::vector<double>& v, const Shape& shape, const Json* attrs, bool log) {
  const Lines l = lines_along(shape, attrs);
  if (v.empty()) return;
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      auto at = [&](std::int64_t k) -> double& { return v[static_cast<std::size_t>((o * l.len + k) * l.inner + i)]; };
      double m = -k_inf;
      bool nan = false;
      for (std::int64_t k = 0; k < l.len; ++k) {
        nan |= std::isnan(at(k));
        m = std::max(m, at(k));
      }
      if (nan) m = std::numeric_limits<double>::quiet_NaN();
      double s = 0.0;
      for (std::int64_t k = 0; k < l.len; ++k) s += std::exp(at(k) - m);
      const double lse = m + std::log(s);
      for (std::int64_t k = 0; k < l.len; ++k) at(k) = log ? at(k) - lse : std::exp(at(k) - m) / s;
    }
}

void sprinkle_specials(std::vector<double>& v, Rng& rng) {
  if (v.empty()) return;
  const double specials[] = {k_nan, k_inf, -k_inf, -0.0};
  const std::size_t count = std::max<std::size_t>(1, v.size() / 50);
  for (std::size_t i = 0; i < count; ++i) v[rng.bounded(v.size())] = specials[rng.bounded(4)];
}

void fill_integers(std::vector<double>& v, Rng& rng, std::int64_t lo, std::int64_t hi, Distribution dist) {
  for (auto& x : v) {
    if (dist == Distribution::boundary || (dist == Distribution::adversarial && rng.chance(1, 4)))
      x = static_cast<double>(rng.chance(1, 2) ? lo : hi);
    else
      x = static_cast<double>(rng.integer(lo, hi));
  }
}


// ---- Formulation patterns (issue 47): inputs at the conditioning limit of a formula that cancels.
// Each is drawn in one adversarial case of 4, from the case's "pattern:<input>" sub-stream, after
// the input's own values (a case it leaves alone keeps its bytes), on the dtype's grid.

// A value on d's grid of magnitude in [2^e, 2^(e+1)), either sign.
double grid_value(Rng& rng, DType d, int e) {
  const double m = rng.uniform(1.0, 2.0) * std::ldexp(1.0, e);
  return round_to(d, rng.chance(1, 2) ? m : -m);
}

// Nearly constant units at a large offset with sparse deviations (layer_norm's rows, group_norm's
// groups): every element of a unit of N is the offset o (in [2^e, 2^(e+1))), but for k of them
// (1 to 8, at most one in 16) o + c·2^(e-q), c in ±[1, 4]: deviations of q bits below the offset,
// a multiple of its spacing (q <= p, the dtype's mantissa bits). Then σ ≈ √(k/N)·c·2^(e-q) and
// o/σ ≈ 2^q·√(N/k)/c, and a one-pass E[x²] − E[x]² in fp32 loses u_fp32·o² to cancellation: a
// relative error of u_fp32·(o/σ)² in the variance, against the bound's u_out + u_fp32·(o/σ)·G·√k
// on a deviating output (docs/error-model.md's norm term), so it shows once (o/σ)² > 2·u_out/u_fp32
// and o/σ > 2·G·√k. Dense rows on the dtype's grid never get there in 16 bits (offset/σ <= 2^(p-2)
// in fill_norm: bfloat16's one-pass error stayed under its output rounding). q is at most
// 16 − log2(N/k)/2 (o/σ <= 2^16), where a correct two-pass kernel's mean, off by u_fp32·o·G, is
// still small next to σ. o is chosen so that the variance is at least 16·eps (eps would hide the
// variance's error) and o² stays far inside fp32.
void nearly_constant_units(std::vector<double>& v, std::int64_t unit, DType d, double eps, Rng& rng) {
  if (unit < 2 || v.empty()) return;
  const int p = dtype_info(d).mantissa_bits;
  const auto units = static_cast<std::int64_t>(v.size()) / unit;
  const auto forced = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(std::max<std::int64_t>(units, 1))));
  int cap_exp = 0;
  std::frexp(dtype_cap(d), &cap_exp);
  for (std::int64_t u = 0; u < units; ++u) {
    if (u != forced && !rng.chance(1, 2)) continue;
    const std::int64_t most = std::clamp<std::int64_t>(unit / 16, 1, 8);
    const auto k = 1 + static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(most)));
    const double n_over_k = static_cast<double>(unit) / static_cast<double>(k);
    const int q_max = std::clamp(16 - static_cast<int>(std::ceil(std::log2(n_over_k) / 2.0)), 2, p);
    const int q = static_cast<int>(rng.integer(std::max(2, q_max - 4), q_max));
    // (2^(e-q))^2·k/N >= 16·eps: e >= q + log2(16·eps·N/k)/2.
    const double need = std::log2(16.0 * std::max(eps, 0x1p-40) * n_over_k);
    const int lo = q + static_cast<int>(std::ceil(need / 2.0));
    const int e = std::min(std::max(lo, -4) + static_cast<int>(rng.integer(0, 4)), std::min(cap_exp - 2, 40));
    const double o = grid_value(rng, d, e);
    double* row = v.data() + u * unit;
    std::fill(row, row + unit, o);
    for (std::int64_t j = 0; j < k; ++j) {
      const auto at = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(unit)));
      const auto c = static_cast<double>(rng.integer(1, 4)) * (rng.chance(1, 2) ? 1.0 : -1.0);
      row[at] = round_to(d, o + c * std::ldexp(1.0, std::ilogb(o) - q));
    }
  }
}

// One dominant logit over many equal ones (the softmax family, logsumexp, cross_entropy's logits):
// along `dim` (one line, and each other with probability 1/2) every logit is c, one is c + δ.
// |c| in [2^e, 2^(e+1)), e the top (20; 15 in float16, |c| <= 65,376 so that c + δ stays finite:
// fp16's range, past its usual drawing cap, since x − max is exact) in half the lines, else
// uniform from 0; δ one of: 0 (a tie of N), 1-4 spacings of c, 8-30, or 104-120 (the others' exp
// then underflows fp32). A kernel that sums exp(x) before it knows the max overflows at c > 88; one
// that takes log(softmax) gets log(0) past δ = 104; one that normalises by a rounded lse,
// exp(x − fl(c + log N)), is off by up to u_fp32·|c| in every probability (6 % at c = 2^20; in
// float16 up to 4 output ulps at |c| >= 2^15, where 2^14 gave 2 and hid it in 4 runs of 20).
void dominant_logit_lines(std::vector<double>& v, const Lines& l, DType d, Rng& rng) {
  if (l.len < 2 || v.empty()) return;
  const bool half = d == DType::float16;
  const int top = half ? 15 : 20;
  const auto forced = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(l.outer * l.inner)));
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      if (o * l.inner + i != forced && !rng.chance(1, 2)) continue;
      double c = grid_value(rng, d, rng.chance(1, 2) ? top : static_cast<int>(rng.integer(0, top)));
      if (half) c = std::clamp(c, -65376.0, 65376.0);  // on fp16's grid (a multiple of 32)
      double delta = 0.0;
      switch (rng.bounded(4)) {
        case 1: delta = static_cast<double>(rng.integer(1, 4)) * spacing(d, c); break;
        case 2: delta = rng.uniform(8.0, 30.0); break;
        case 3: delta = rng.uniform(104.0, 120.0); break;
        default: break;
      }
      const auto dom = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(l.len)));
      for (std::int64_t k = 0; k < l.len; ++k) v[static_cast<std::size_t>((o * l.len + k) * l.inner + i)] = c;
      v[static_cast<std::size_t>((o * l.len + dom) * l.inner + i)] = round_to(d, c + delta);
    }
}

// Long prefix sums that cancel (cumsum): along `dim` (one line, and each other with probability
// 1/2) a head of small values (ε = 2^[-4, 0]) and then adjacent pairs a, −a + c·spacing(a)
// (c in [-2, 2]) of magnitude L = ε·2^(p+[4, 8]) (p the mantissa bits; within the dtype's range).
// Every prefix of the tail returns to the head's scale, so the running sums cancel; a kernel
// that derives the prefix from the line's total minus its suffix loses u_fp32·Σ|tail| on the
// head, where the bound holds only the head's own u_fp32·Σ|head| and the output's rounding.
void cancelling_prefix_lines(std::vector<double>& v, const Lines& l, DType d, Rng& rng) {
  if (l.len < 4 || v.empty()) return;
  const int p = dtype_info(d).mantissa_bits;
  int max_exp = 0;
  std::frexp(std::min(dtype_info(d).max_finite / 16.0, 1e30), &max_exp);
  const auto forced = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(l.outer * l.inner)));
  for (std::int64_t o = 0; o < l.outer; ++o)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      if (o * l.inner + i != forced && !rng.chance(1, 2)) continue;
      auto at = [&](std::int64_t k) -> double& { return v[static_cast<std::size_t>((o * l.len + k) * l.inner + i)]; };
      const int eps_exp = static_cast<int>(rng.integer(-4, 0));
      const int big_exp = std::min(eps_exp + p + static_cast<int>(rng.integer(4, 8)), max_exp - 2);
      const auto head = 1 + static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(l.len / 2)));
      for (std::int64_t k = 0; k < head; ++k) at(k) = round_to(d, rng.normal() * std::ldexp(1.0, eps_exp));
      std::int64_t k = head;
      for (; k + 1 < l.len; k += 2) {
        const double a = grid_value(rng, d, big_exp - static_cast<int>(rng.integer(0, 2)));
        at(k) = a;
        at(k + 1) = round_to(d, -a + static_cast<double>(rng.integer(-2, 2)) * spacing(d, a));
      }
      if (k < l.len) at(k) = 0.0;
    }
}

// Tiny magnitudes for the elementwise ops: about half the elements at ±2^e, e from the dtype's
// smallest normal exponent (at most 2^-60 down) to 2^-9, where 1 − σ(−x), 2σ(2x) − 1 or
// (e^(2x) − 1)/(e^(2x) + 1) cancel against an fp32 one (fill_wide draws no magnitude below 2^-8).
void tiny_magnitudes(std::vector<double>& v, DType d, Rng& rng) {
  const int lo = std::max(std::ilogb(dtype_info(d).min_normal), -60);
  for (auto& x : v)
    if (rng.chance(1, 2)) x = grid_value(rng, d, static_cast<int>(rng.integer(lo, -9)));
}

double attr_number(const Json* attrs, const char* name, double dflt) {
  if (attrs && attrs->contains(name) && (*attrs)[name].is_number()) return (*attrs)[name].get<double>();
  return dflt;
}

// Draws the formulation patterns of issue 47 where the op has one (docs/fuzzing.md).
void formulation_patterns(std::vector<double>& v, const ValueRequest& req, const std::string& kind) {
  const OpSchema& s = *req.schema;
  const InputSpec& in = *req.spec;
  if (v.empty() || req.pattern_seed == 0) return;
  // An input with a recipe of its own (an op inferred from PyTorch code) takes its recipe's pattern,
  // along its last dim.
  const bool norm = ((s.name == "layer_norm" || s.name == "group_norm") && in.name == "x") || in.values == "norm";
  const bool logits = ((s.name == "softmax" || s.name == "log_softmax" || s.name == "logsumexp") && in.name == "x") ||
                      in.values == "logits";
  const bool loss_logits = s.name == "cross_entropy" && in.name == "logits";
  const bool scan = s.name == "cumsum" && in.name == "x";
  const bool elementwise = ((s.family == "elementwise" && in.values.empty()) || in.values == "wide") && kind == "real" &&
                           s.name.find("_backward") == std::string::npos;
  if (!norm && !logits && !loss_logits && !scan && !elementwise) return;
  Rng rng(req.pattern_seed);
  if (!rng.chance(1, 4)) return;
  const DType d = req.dtype;
  if (norm) {
    std::int64_t unit = last_dim(req.shape);
    if (in.values == "norm" && req.shape.size() > 1) {
      // An op inferred from PyTorch code normalises over dims its schema does not name (a group
      // norm's groups of channels, a batch norm's batch): the unit is the last k dims, k drawn
      // from 1 to the rank, so that every group of trailing dims, and the whole tensor, may be
      // nearly constant.
      const auto k = 1 + static_cast<std::size_t>(rng.bounded(req.shape.size()));
      unit = 1;
      for (std::size_t i = req.shape.size() - k; i < req.shape.size(); ++i) unit *= req.shape[i];
    }
    if (s.name == "group_norm") {
      const auto g = static_cast<std::int64_t>(attr_number(req.attrs, "num_groups", 1.0));
      const std::int64_t b = req.shape.empty() ? 1 : req.shape[0];
      const auto n = static_cast<std::int64_t>(v.size());
      if (g < 1 || b < 1 || n % (b * g) != 0) return;
      unit = n / (b * g);
    }
    nearly_constant_units(v, unit, d, attr_number(req.attrs, "eps", 1e-5), rng);
  } else if (logits || loss_logits) {
    Lines l = lines_along(req.shape, req.attrs);
    if (loss_logits) {  // the class dim is 1
      Json class_dim = {{"dim", 1}};
      l = lines_along(req.shape, &class_dim);
    }
    dominant_logit_lines(v, l, d, rng);
  } else if (scan) {
    cancelling_prefix_lines(v, lines_along(req.shape, req.attrs), d, rng);
  } else {
    tiny_magnitudes(v, d, rng);
  }
}

}  // namespace

std::vector<double> generate_values(const ValueRequest& req, Rng& rng) {
  const auto n = static_cast<std::size_t>(shape_numel(req.shape));
  std::vector<double> v(n, 0.0);
  const InputSpec& in = *req.spec;
  const OpSchema& s = *req.schema;
  const std::string& domain = in.domain;
  const auto colon = domain.find(':');
  const std::string kind = colon == std::string::npos ? domain : domain.substr(0, colon);

  if (kind == "indices") {
    fill_integers(v, rng, 0, std::max<std::int64_t>(req.bound - 1, 0), req.distribution);
    return v;
  }
  if (kind == "lengths") {
    fill_integers(v, rng, 1, std::max<std::int64_t>(req.bound, 1), req.distribution);
    if (req.distribution != Distribution::boundary)
      for (auto& x : v)  // lengths around block boundaries
        if (rng.chance(1, 3)) {
          const std::int64_t blocks[] = {16, 32, 64, 128, 256};
          const std::int64_t b = blocks[rng.bounded(5)] + static_cast<std::int64_t>(rng.integer(-1, 1));
          x = static_cast<double>(std::clamp<std::int64_t>(b, 1, std::max<std::int64_t>(req.bound, 1)));
        }
    return v;
  }
  if (kind == "targets") {
    fill_integers(v, rng, 0, std::max<std::int64_t>(req.bound - 1, 0), req.distribution);
    if (req.attrs && req.attrs->contains("ignore_index") && (*req.attrs)["ignore_index"].is_number_integer() &&
        req.distribution != Distribution::regular)
      for (auto& x : v)
        if (rng.chance(1, 8)) x = (*req.attrs)["ignore_index"].get<double>();
    return v;
  }
  if (!dtype_info(req.dtype).is_floating) {
    const auto& info = dtype_info(req.dtype);
    fill_integers(v, rng, static_cast<std::int64_t>(std::max(info.lowest, -1000.0)),
                  static_cast<std::int64_t>(std::min(info.max_finite, 1000.0)), req.distribution);
    return v;
  }

  const bool positive = kind == "positive" || kind == "scale";
  const bool nonnegative = kind == "nonnegative" || kind == "probabilities";
  switch (req.distribution) {
    case Distribution::regular:
      fill_regular(v, rng, 1.0);
      break;
    case Distribution::boundary:
      fill_boundary(v, rng, req.dtype, positive, nonnegative);
      break;
    case Distribution::special:
      fill_regular(v, rng, 2.0);
      break;
    case Distribution::adversarial:
      if (kind == "grad") fill_grad(v, req.shape, req.attrs, rng, req.dtype);
      else if (kind == "loss_grad") {
        if (req.shape.empty()) fill_wide(v, rng, req.dtype, false);  // a scalar loss's
        else fill_row_loss_grad(v, rng, req.dtype);
      }
      else if (positive || nonnegative) fill_wide(v, rng, req.dtype, true);
      else if (is_logit_like(s, in)) {
        fill_logits(v, req.shape, rng, req.dtype, in.name == "k" || in.name == "k_cache");
        if (s.name == "logsumexp") center_log_sum_exp(v, req.shape, req.attrs, rng);
      } else if (is_norm_input(s, in)) fill_norm(v, req.shape, rng, req.dtype, req.schema->name == "l2norm");
      else if (is_accumulated(s, in)) {
        fill_accumulated(v, rng);
        if (s.family == "scan" || s.name == "sum" || s.name == "mean") cancel_lines(v, req.shape, req.attrs, req.dtype, rng);
      }
      else if (in.values == "wide" || (in.values.empty() && (s.family == "elementwise" || s.family == "binary" ||
                                                             s.family == "quant")))
        fill_wide(v, rng, req.dtype, false);
      else fill_regular(v, rng, rng.chance(1, 2) ? 1.0 : 8.0);
      formulation_patterns(v, req, kind);
      break;
  }
  if (kind == "scale") {
    for (auto& x : v) x = std::fabs(x) < 1e-30 ? 1.0 : std::clamp(std::fabs(x), 1e-6, 1e6);
  } else if (positive) {
    for (auto& x : v) x = std::fabs(x) == 0.0 ? dtype_info(req.dtype).min_normal : std::fabs(x);
  } else if (nonnegative) {
    for (auto& x : v) x = std::fabs(x);
  }
  if (kind == "probabilities" || kind == "unit") {
    for (auto& x : v) x = std::min(1.0, x / (1.0 + x));
  }
  // The upstream gradient of a scalar loss (domain "loss_grad") is one value that scales every
  // output: a special one only in one case of 4, so that the other inputs' special values are
  // judged under a finite one too.
  if (req.distribution == Distribution::special && (kind != "loss_grad" || rng.chance(1, 4))) sprinkle_specials(v, rng);
  if (kind == "saved_softmax" || kind == "saved_log_softmax")
    apply_saved_forward(v, req.shape, req.attrs, kind == "saved_log_softmax");
  round_elements(req.dtype, v.data(), v.size());
  return v;
}

namespace {

// Makes one dot product sum_k a[ia[k]] * b[ib[k]] (+ c) cancel, changing only b: the terms, in a
// random order, are paired, and in each pair the b of the larger |a| is set to cancel the other
// term, then moved by c in [-2, 2] of its own ulps (as cancel_lines does), so the pairs' exact sum
// is a few ulps of the products while sum |a*b| is unchanged in scale: a condition number of about
// sqrt(K) / u_in. A nonzero bias c is cancelled by one more term (b = -c / a, rounded), and a
// term left over is zeroed. Every b written is on the dtype's grid; a pair's is no larger than the
// drawn b it cancels (to its +-2 ulps), the bias's within dtype_cap.
void cancel_dot(const Tensor& a, Tensor& b, const std::vector<std::int64_t>& ia,
                const std::vector<std::int64_t>& ib, double c, Rng& rng) {
  const auto n = static_cast<std::int64_t>(ia.size());
  const DType d = b.dtype();
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) perm[static_cast<std::size_t>(k)] = k;
  for (std::int64_t k = n - 1; k > 0; --k)  // Fisher-Yates
    std::swap(perm[static_cast<std::size_t>(k)], perm[static_cast<std::size_t>(rng.bounded(static_cast<std::uint64_t>(k) + 1))]);
  auto A = [&](std::int64_t k) { return a.get_flat(ia[static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])]); };
  auto B = [&](std::int64_t k) { return b.get_flat(ib[static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])]); };
  auto set_b = [&](std::int64_t k, double v) { b.set_flat(ib[static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])], v); };
  const bool bias = c != 0.0 && std::isfinite(c);
  const std::int64_t pairs = (n - (bias ? 1 : 0)) / 2;
  for (std::int64_t p = 0; p < pairs; ++p) {
    std::int64_t big = 2 * p, small = 2 * p + 1;
    if (std::fabs(A(small)) > std::fabs(A(big))) std::swap(big, small);
    const double ab = A(big), as = A(small), bs = B(small);
    if (ab == 0.0 || !std::isfinite(ab) || !std::isfinite(as) || !std::isfinite(bs)) continue;
    double v = round_to(d, -as * bs / ab);
    if (v != 0.0) v = round_to(d, v + static_cast<double>(rng.integer(-2, 2)) * spacing(d, v));
    set_b(big, v);
  }
  for (std::int64_t k = 2 * pairs; k < n; ++k) {
    double v = 0.0;
    if (bias && k == 2 * pairs) {
      const double ak = A(k);
      if (ak == 0.0 || !std::isfinite(ak) || std::fabs(c / ak) > dtype_cap(d)) continue;
      v = round_to(d, -c / ak);
    }
    set_b(k, v);
  }
}

// Convolutions (conv1d, conv2d): for one output channel (and each other with probability 1/8), one
// output (a batch, a position); its terms are x at the taps that fall inside the input (those in
// the zero padding add nothing) times the channel's weights, cancelled by changing x there (as
// cancel_dot does). x, not the weights: a patch of x feeds only the outputs around it, while a
// channel's weights feed every position, and a channel made to cancel against one patch of
// same-sign inputs cancels nearly everywhere, taking away the long same-sign sums that an
// accumulator's loss shows on (the power curve: conv1d float16 caught from k = 2^7 that way, 2^5
// before). A later patch that overlaps an earlier one undoes part of it; the last one holds.
void cancel_conv(const TestCase& c, Tensor& x, const Tensor& w, const Tensor* bias, Rng& rng) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const auto spatial = static_cast<std::int64_t>(xs.size()) - 2;
  if (spatial < 1 || spatial > 2 || ws.size() != xs.size()) return;
  auto ints = [&](const char* name, std::int64_t dflt) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(spatial), dflt);
    if (!c.attrs.contains(name)) return v;
    const Json& j = c.attrs[name];
    for (std::int64_t d = 0; d < spatial; ++d) {
      if (j.is_array() && static_cast<std::int64_t>(j.size()) > d && j[static_cast<std::size_t>(d)].is_number_integer())
        v[static_cast<std::size_t>(d)] = j[static_cast<std::size_t>(d)].get<std::int64_t>();
      else if (j.is_number_integer()) v[static_cast<std::size_t>(d)] = j.get<std::int64_t>();
    }
    return v;
  };
  const auto stride = ints("stride", 1), padding = ints("padding", 0), dilation = ints("dilation", 1);
  const std::int64_t groups = c.attrs.contains("groups") && c.attrs["groups"].is_number_integer()
                                  ? std::max<std::int64_t>(c.attrs["groups"].get<std::int64_t>(), 1) : 1;
  const std::int64_t B = xs[0], Cin = xs[1], Cout = ws[0], Cg = ws[1];
  if (B < 1 || Cout < 1 || Cg < 1 || Cout % groups != 0 || Cg * groups != Cin) return;
  // Spatial sizes as (H, W) with H = 1 for conv1d.
  const std::int64_t H = spatial == 2 ? xs[2] : 1, W = xs.back();
  const std::int64_t Kh = spatial == 2 ? ws[2] : 1, Kw = ws.back();
  const std::int64_t sh = spatial == 2 ? stride[0] : 1, sw = stride.back();
  const std::int64_t ph = spatial == 2 ? padding[0] : 0, pw = padding.back();
  const std::int64_t dh = spatial == 2 ? dilation[0] : 1, dw = dilation.back();
  if (sh < 1 || sw < 1) return;
  const std::int64_t Hout = (H + 2 * ph - dh * (Kh - 1) - 1) / sh + 1, Wout = (W + 2 * pw - dw * (Kw - 1) - 1) / sw + 1;
  if (Hout < 1 || Wout < 1) return;
  std::vector<std::int64_t> ia, ib;
  const auto forced = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(Cout)));
  for (std::int64_t oc = 0; oc < Cout; ++oc) {
    if (oc != forced && !rng.chance(1, 8)) continue;
    const std::int64_t g = oc / (Cout / groups);
    const double cj = bias ? bias->get_flat(oc) : 0.0;
    // A position whose taps reach the input (in the padding an output is its bias alone): up to
    // 8 draws.
    for (int attempt = 0; attempt < 8; ++attempt) {
      const std::int64_t n = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(B)));
      const std::int64_t oh = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(Hout)));
      const std::int64_t ow = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(Wout)));
      ia.clear();
      ib.clear();
      for (std::int64_t ci = 0; ci < Cg; ++ci)
        for (std::int64_t kh = 0; kh < Kh; ++kh)
          for (std::int64_t kw = 0; kw < Kw; ++kw) {
            const std::int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            ia.push_back(((n * Cin + g * Cg + ci) * H + ih) * W + iw);
            ib.push_back(((oc * Cg + ci) * Kh + kh) * Kw + kw);
          }
      if (ia.size() >= 2 || (!ia.empty() && cj != 0.0)) break;
    }
    if (ia.size() < 2 && cj == 0.0) continue;
    cancel_dot(w, x, ib, ia, cj, rng);
  }
}

// layer_norm's saved statistic per row of x[..., N] (domain "saved_mean": the mean; "saved_ln_rstd":
// 1 / sqrt(var + eps), biased variance), in fp64 by a corrected two-pass, rounded once to the
// input's dtype (what a forward kernel stores), whatever its drawn values were.
void derive_layer_norm_stat(TestCase& c, const std::string& name, bool mean_of) {
  auto si = c.inputs.find(name);
  auto xi = c.inputs.find("x");
  if (si == c.inputs.end() || xi == c.inputs.end() || xi->second.shape().empty()) return;
  const Tensor& x = xi->second;
  Tensor& out = si->second;
  const std::int64_t n = x.shape().back(), rows = n > 0 ? x.numel() / n : 0;
  double eps = 0.0;
  if (c.attrs.contains("eps") && c.attrs["eps"].is_number()) eps = c.attrs["eps"].get<double>();
  std::vector<double> row(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < rows && r < out.numel(); ++r) {
    double s = 0.0;
    for (std::int64_t k = 0; k < n; ++k) s += (row[static_cast<std::size_t>(k)] = x.get_flat(r * n + k));
    double mean = s / static_cast<double>(n), dev = 0.0, ssq = 0.0;
    for (double v : row) dev += v - mean;
    mean += dev / static_cast<double>(n);
    for (double v : row) ssq += (v - mean) * (v - mean);
    out.set_flat(r, round_to(out.dtype(), mean_of ? mean : 1.0 / std::sqrt(ssq / static_cast<double>(n) + eps)));
  }
}

}  // namespace

namespace {

// flash_attention_backward's saved forward outputs (domains "saved_attention_out" and
// "saved_attention_lse"): an fp64 forward of the case's q [B, H, Lq, D], k and v [B, Hkv, Lk, D]
// under its attrs (causal top-left, scale or 1/sqrt(D), KV head h / (H / Hkv)), out rounded once to
// its dtype and lse (natural log, log sum_j exp(s_ij) over the attended keys) to fp32, as a forward
// kernel stores them. Masked keys take no part; a NaN among the attended scores makes the row NaN,
// an all -Inf row gives NaN out and lse (0/0), as the forward reference does.
void derive_saved_attention(const OpSchema& s, TestCase& c) {
  Tensor* out = nullptr;
  Tensor* lse = nullptr;
  for (const auto& spec : s.inputs) {
    auto it = c.inputs.find(spec.name);
    if (it == c.inputs.end()) continue;
    if (spec.domain == "saved_attention_out") out = &it->second;
    if (spec.domain == "saved_attention_lse") lse = &it->second;
  }
  auto qi = c.inputs.find("q"), ki = c.inputs.find("k"), vi = c.inputs.find("v");
  if ((!out && !lse) || qi == c.inputs.end() || ki == c.inputs.end() || vi == c.inputs.end()) return;
  const Shape& qs = qi->second.shape();
  const Shape& ks = ki->second.shape();
  if (qs.size() != 4 || ks.size() != 4 || vi->second.shape() != ks || ks[0] != qs[0] || ks[3] != qs[3]) return;
  const std::int64_t B = qs[0], H = qs[1], Lq = qs[2], D = qs[3], Hkv = ks[1], Lk = ks[2];
  if (Hkv < 1 || H % Hkv != 0) return;
  if (out && out->numel() != B * H * Lq * D) out = nullptr;
  if (lse && lse->numel() != B * H * Lq) lse = nullptr;
  const bool causal = c.attrs.contains("causal") && c.attrs["causal"].is_boolean() && c.attrs["causal"].get<bool>();
  double scale = D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;
  if (c.attrs.contains("scale") && c.attrs["scale"].is_number()) scale = c.attrs["scale"].get<double>();
  const auto q = qi->second.to_f64(), k = ki->second.to_f64(), v = vi->second.to_f64();
  std::vector<double> sc(static_cast<std::size_t>(std::max<std::int64_t>(Lk, 1))), o(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t hk = h / (H / Hkv);
      const double* kb = k.data() + (b * Hkv + hk) * Lk * D;
      const double* vb = v.data() + (b * Hkv + hk) * Lk * D;
      for (std::int64_t i = 0; i < Lq; ++i) {
        const std::int64_t row = (b * H + h) * Lq + i;
        const double* qr = q.data() + row * D;
        const std::int64_t n = causal ? std::min(i + 1, Lk) : Lk;
        double m = -k_inf;
        bool nan = false;
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < D; ++d) dot += qr[d] * kb[j * D + d];
          sc[static_cast<std::size_t>(j)] = dot * scale;
          nan |= std::isnan(sc[static_cast<std::size_t>(j)]);
          m = std::max(m, sc[static_cast<std::size_t>(j)]);
        }
        if (nan) m = std::numeric_limits<double>::quiet_NaN();
        double l = 0.0;
        for (std::int64_t j = 0; j < n; ++j) l += std::exp(sc[static_cast<std::size_t>(j)] - m);
        std::fill(o.begin(), o.end(), 0.0);
        for (std::int64_t j = 0; j < n; ++j) {
          const double p = std::exp(sc[static_cast<std::size_t>(j)] - m) / l;
          for (std::int64_t d = 0; d < D; ++d) o[static_cast<std::size_t>(d)] += p * vb[j * D + d];
        }
        if (n == 0) std::fill(o.begin(), o.end(), std::numeric_limits<double>::quiet_NaN());
        if (out)
          for (std::int64_t d = 0; d < D; ++d) out->set_flat(row * D + d, round_to(out->dtype(), o[static_cast<std::size_t>(d)]));
        if (lse) lse->set_flat(row, round_to(lse->dtype(), n == 0 ? -k_inf : m + std::log(l)));
      }
    }
}

}  // namespace

namespace {

// softmax_backward's and log_softmax_backward's saved y where the case also holds the forward's
// logits x (the optional input "x", present when pinned: autograd's backward=True): y is then the
// forward of those exact values, fp64 along `dim` and rounded once to y's dtype (as a forward
// kernel returns it), whatever y's own draw was, so that the case is one forward's.
void derive_saved_softmax_output(const OpSchema& s, TestCase& c) {
  auto xi = c.inputs.find("x");
  if (xi == c.inputs.end()) return;
  for (const auto& spec : s.inputs) {
    if (spec.domain != "saved_softmax" && spec.domain != "saved_log_softmax") continue;
    auto yi = c.inputs.find(spec.name);
    if (yi == c.inputs.end() || yi->second.shape() != xi->second.shape()) continue;
    std::vector<double> v = xi->second.to_f64();
    apply_saved_forward(v, xi->second.shape(), &c.attrs, spec.domain == "saved_log_softmax");
    Tensor& y = yi->second;
    for (std::size_t k = 0; k < v.size(); ++k)
      y.set_flat(static_cast<std::int64_t>(k), round_to(y.dtype(), v[k]));
  }
}

}  // namespace

void derive_saved(const OpSchema& s, TestCase& c) {
  derive_saved_attention(s, c);
  derive_saved_softmax_output(s, c);
  for (const auto& spec : s.inputs) {
    if (spec.domain == "saved_mean" || spec.domain == "saved_ln_rstd") {
      derive_layer_norm_stat(c, spec.name, spec.domain == "saved_mean");
      continue;
    }
    if (spec.domain != "saved_rstd") continue;
    auto ri = c.inputs.find(spec.name);
    auto xi = c.inputs.find("x");
    if (ri == c.inputs.end() || xi == c.inputs.end() || xi->second.shape().empty()) continue;
    // rms_norm's rstd per row of x[..., N]: 1 / sqrt(mean(x^2) + eps) in fp64, rounded once to the
    // input's dtype (what a forward kernel stores), whatever its drawn values were.
    const Tensor& x = xi->second;
    Tensor& r = ri->second;
    const std::int64_t n = x.shape().back(), rows = n > 0 ? x.numel() / n : 0;
    double eps = 0.0;
    if (c.attrs.contains("eps") && c.attrs["eps"].is_number()) eps = c.attrs["eps"].get<double>();
    for (std::int64_t row = 0; row < rows && row < r.numel(); ++row) {
      double ss = 0.0;
      for (std::int64_t k = 0; k < n; ++k) {
        const double v = x.get_flat(row * n + k);
        ss += v * v;
      }
      r.set_flat(row, round_to(r.dtype(), 1.0 / std::sqrt(ss / static_cast<double>(n) + eps)));
    }
  }
}

void draw_jointly(const OpSchema& s, TestCase& c, Rng& rng) {
  if (c.distribution != Distribution::adversarial || !c.value_transforms.empty()) return;
  if (s.family != "gemm" && s.family != "conv") return;
  if (s.name == "matmul_backward") return;  // its dot products are grad_out's, not a @ b's
  const bool linear = s.name == "linear", conv = s.family == "conv";
  const char* a_name = linear || conv ? "x" : "a";
  const char* b_name = linear || conv ? "weight" : "b";
  auto ai = c.inputs.find(a_name), bi = c.inputs.find(b_name);
  if (ai == c.inputs.end() || bi == c.inputs.end()) return;
  // The dim a stride-0 (expanded) layout repeats an input along, or -1.
  auto expanded_dim = [&](const char* name) -> std::int64_t {
    auto l = c.layouts.find(name);
    return l != c.layouts.end() && l->second.kind == "expanded" ? l->second.param : -1;
  };
  const Tensor* bias = nullptr;
  if (auto it = c.inputs.find("bias"); (linear || conv) && it != c.inputs.end()) {
    if (expanded_dim("bias") >= 0) return;
    bias = &it->second;
  }
  if (conv) {
    if (expanded_dim(a_name) >= 0 || expanded_dim(b_name) >= 0) return;
    cancel_conv(c, ai->second, bi->second, bias, rng);
    return;
  }
  // The dot products: batches g, rows i of a, columns j of b, each of length K.
  //   matmul a[M, K] b[K, N]; bmm a[G, M, K] b[G, K, N]; linear x[..., K] weight[N, K] (+ bias[N]).
  Tensor& a = ai->second;
  Tensor& b = bi->second;
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  if (as.size() < 2 || bs.size() < 2) return;
  const std::int64_t K = as.back();
  const std::int64_t G = s.name == "bmm" ? as[0] : 1;
  const std::int64_t M = linear ? a.numel() / std::max<std::int64_t>(K, 1) : as[as.size() - 2];
  const std::int64_t N = linear ? bs[0] : bs.back();
  if (K < 1 || M < 1 || N < 1 || G < 1) return;
  // b's columns are changed (one, and each other with probability 1/8: a column made to cancel
  // against one row of same-sign values cancels against most rows, and the long same-sign sums
  // that an accumulator's loss shows on must stay in most of the output), or a's rows where b
  // repeats along K (an expanded b holds one value per column); an operand expanded along another
  // dim is changed for one dot product only (its writes land on every copy).
  const auto a_exp = expanded_dim(a_name), b_exp = expanded_dim(b_name);
  const std::int64_t a_k = static_cast<std::int64_t>(as.size()) - 1, b_k = linear ? 1 : static_cast<std::int64_t>(bs.size()) - 2;
  const bool change_b = b_exp != b_k;
  if (!change_b && a_exp == a_k) return;
  const bool only_forced = (change_b ? b_exp : a_exp) >= 0;
  const std::int64_t lines = change_b ? N : M, across = change_b ? M : N;
  std::vector<std::int64_t> ia(static_cast<std::size_t>(K)), ib(static_cast<std::size_t>(K));
  const auto forced = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(G * lines)));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t l = 0; l < lines; ++l) {
      if (g * lines + l != forced && (only_forced || !rng.chance(1, 8))) continue;
      const auto other = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(across)));
      const std::int64_t i = change_b ? other : l, j = change_b ? l : other;
      for (std::int64_t k = 0; k < K; ++k) {
        ia[static_cast<std::size_t>(k)] = (g * M + i) * K + k;
        ib[static_cast<std::size_t>(k)] = linear ? j * K + k : (g * K + k) * N + j;
      }
      const double cj = bias ? bias->get_flat(j) : 0.0;
      if (K < 2 && cj == 0.0) continue;
      if (change_b) cancel_dot(a, b, ia, ib, cj, rng);
      else cancel_dot(b, a, ib, ia, cj, rng);
    }
}

std::vector<double> transform_values(const std::string& transform, std::vector<double> values, DType dtype) {
  if (transform == "zeros") std::fill(values.begin(), values.end(), 0.0);
  else if (transform == "ones") std::fill(values.begin(), values.end(), 1.0);
  else if (transform == "small_ints")
    for (auto& x : values) x = std::isfinite(x) ? std::clamp(std::nearbyint(x), -2.0, 2.0) : x;
  round_elements(dtype, values.data(), values.size());
  return values;
}

}  // namespace gpuemu
