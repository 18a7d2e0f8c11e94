#include "engine/values.hpp"

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
  if (s.family == "softmax") return true;
  if (s.family == "attention") return in.name == "q" || in.name == "k" || in.name == "k_cache";
  if (s.family == "loss") return in.name == "logits";
  return s.name == "logsumexp" || s.name == "argmax" || s.name == "amax";
}

bool is_norm_input(const OpSchema& s, const InputSpec& in) {
  return (s.family == "norm" || s.name == "l2norm") && in.name == "x";
}

bool is_accumulated(const OpSchema& s) {
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
  // The draws in index order: the late spike's chance() interleaves with them, so that pattern
  // draws one by one; every other takes the normals in bulk (the same stream, the same bits).
  const bool bulk = key_like || pattern != 2;
  if (bulk) rng.normals(v.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i) % n;
    double x = (bulk ? v[i] : rng.normal()) * spread + offset;
    if (key_like) {
      // Keys: grow along the sequence dim so later keys give larger scores.
      const auto row = (static_cast<std::int64_t>(i) / n) % std::max<std::int64_t>(rows_len, 1);
      if (pattern != 0) x *= 1.0 + 3.0 * static_cast<double>(row) / static_cast<double>(std::max<std::int64_t>(rows_len, 1));
    } else if (pattern == 1) {
      x += ramp * static_cast<double>(k) / static_cast<double>(n);
    } else if (pattern == 2 && k >= n - std::max<std::int64_t>(n / 4, 1) && rng.chance(1, 16)) {
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
    case 1:
      for (auto& x : v) x = rng.normal() * (rng.chance(1, 64) ? 64.0 : 1.0);
      break;
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
      if (positive || nonnegative) fill_wide(v, rng, req.dtype, true);
      else if (is_logit_like(s, in)) {
        fill_logits(v, req.shape, rng, req.dtype, in.name == "k" || in.name == "k_cache");
        if (s.name == "logsumexp") center_log_sum_exp(v, req.shape, req.attrs, rng);
      } else if (is_norm_input(s, in)) fill_norm(v, req.shape, rng, req.dtype, req.schema->name == "l2norm");
      else if (is_accumulated(s)) {
        fill_accumulated(v, rng);
        if (s.family == "scan" || s.name == "sum" || s.name == "mean") cancel_lines(v, req.shape, req.attrs, req.dtype, rng);
      }
      else if (s.family == "elementwise" || s.family == "binary" || s.family == "quant") fill_wide(v, rng, req.dtype, false);
      else fill_regular(v, rng, rng.chance(1, 2) ? 1.0 : 8.0);
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
  if (req.distribution == Distribution::special) sprinkle_specials(v, rng);
  for (auto& x : v) x = round_to(req.dtype, x);
  return v;
}

std::vector<double> transform_values(const std::string& transform, std::vector<double> values, DType dtype) {
  if (transform == "zeros") std::fill(values.begin(), values.end(), 0.0);
  else if (transform == "ones") std::fill(values.begin(), values.end(), 1.0);
  else if (transform == "small_ints")
    for (auto& x : values) x = std::isfinite(x) ? std::clamp(std::nearbyint(x), -2.0, 2.0) : x;
  for (auto& x : values) x = round_to(dtype, x);
  return values;
}

}  // namespace gpuemu
