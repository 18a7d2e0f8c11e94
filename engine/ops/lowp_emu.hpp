// Helpers for the emulated low-precision kernels of the elementwise, reduction, norm and loss ops:
// storing an fp32 value to a tensor of a low-precision dtype, summing a row the ways GPU kernels do
// (fp32 tiles reduced as trees, two-stage splits, Welford lanes), and the accumulation bugs
// LLM-written kernels make (a running sum kept in the input dtype, a dropped tail tile, `acc =`
// instead of `acc +=`). Also the condition-term conventions those ops share.
#pragma once

#include "gpuemu/engine/dtype.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gpuemu::ops {

using KernelOutputs = std::vector<std::vector<double>>;

constexpr double k_fp32_max = static_cast<double>(std::numeric_limits<float>::max());
// FLT_MIN = 2^-126: half of float32's subnormal spacing in units of u_fp32 (2^-150 / 2^-24). An
// fp32 intermediate that underflows is off by up to u_fp32 * FLT_MIN times what multiplies it next.
constexpr double k_fp32_min_normal = 0x1p-126;
constexpr float k_inf_f = std::numeric_limits<float>::infinity();
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

// `v` (an fp32 value) stored to a tensor of `dtype` and loaded back.
inline float store_as(DType dtype, float v) {
  if (dtype == DType::float32) return v;
  return static_cast<float>(round_to(dtype, static_cast<double>(v)));
}

// The condition term of an element whose correct fp32 computation forms the intermediate
// `intermediate` (a sum of magnitudes, a sum of squares): when that exceeds a quarter of float32's
// range a correct kernel may overflow and return anything (a finite 0, or Inf/NaN), so the term
// becomes the intermediate itself. The verdict reads c_acc >= FLT_MAX/4 as "indeterminate" for
// non-finite outputs, and a finite output then sits far inside u_fp32 * c_acc.
// (An infinite intermediate comes from an infinite input, which the reference propagates itself.)
inline double overflow_guard(double c_acc, double intermediate) {
  return intermediate >= k_fp32_max / 4 && std::isfinite(intermediate)
             ? std::max(c_acc, intermediate)
             : c_acc;
}

// The growth of an fp32 sum's rounding error over n terms t_k, in units of u_fp32 * sum|t_k|
// (docs/error-model.md, "Correlated rounding"). sqrt(n) while successive roundings are
// independent: the terms' residues on the running sum's grid spread over many grid cells. Where the
// terms are equal to within `spread` = max|t| - min|t| < 32 u * S_k (S_k ~ k * mean|t|, the
// running sum after k terms), each addition rounds the same way as the one before, and a running
// sum's errors add up one-signed: past k* = spread / (32 u * mean|t|) the deterministic bound
// u * sum_{k > k*} S_k = u * mean|t| * (n^2 - k*^2) / 2, or (n^2 - k*^2) / (2n) in these units. Rows
// of equal terms get (n + 1)/2 (measured n/8 to n/4 for a single-thread loop, PyTorch's strided
// vector_norm included); rows of varied terms keep sqrt(n).
//
// Absorption (the same section): sqrt(n) also assumes each rounding is spread over the grid. A term
// within about an ulp of the running sum is not: a term below half an ulp is dropped whole (error
// -|t|), one a little above rounds by ulp - |t|, whatever the sum, so such terms' errors add up
// one-signed however varied they are (a softmax row whose exp(x - max) are mostly far below the
// max's 1, a row of a few large values and many small ones). Each addition errs by at most
// min(|t|, half an ulp of the sum) <= min(|t|, u * S), S = sum|t| bounding every running sum, so
// terms |t| <= 2u * S add sum min(|t|, u * S), in units of u * S: absorbed(); larger terms' residues
// spread over the grid and stay under sqrt(n). (A single-thread fp32 loop over 12481 exp terms
// from -48 to -14: 477 u against sqrt(n) = 112; absorbed() gives 1228.)
class SumGrowth {
 public:
  void add(double t) {
    const double a = std::fabs(t);
    lo_ = std::min(lo_, a);
    hi_ = std::max(hi_, a);
    abs_sum_ += a;
    if (a <= 2.0 * 0x1p-24 * abs_sum_) run_absorbed_ += std::min(a, 0x1p-24 * abs_sum_);
  }
  // absorbed() of the terms added so far, each against the running sum|t| when it was added: the
  // bound for a prefix formed in index order (a scan), in units of u * abs_sum().
  double prefix_absorbed() const {
    return abs_sum_ > 0.0 && std::isfinite(abs_sum_) ? run_absorbed_ / (0x1p-24 * abs_sum_) : 0.0;
  }
  // Sum over k < n of min(|term(k)|, u * s) for |term(k)| <= 2u * s, in units of u * s, where s =
  // sum|term(k)| (or more): the absorbed terms of a sum in any order.
  template <class Term>
  static double absorbed(std::int64_t n, double s, Term&& term) {
    if (!(s > 0.0) || !std::isfinite(s)) return 0.0;
    const double half = 0x1p-24 * s, lim = 2.0 * half;
    double a = 0.0;
    for (std::int64_t k = 0; k < n; ++k) {
      const double t = std::fabs(term(k));
      a += t <= lim ? std::min(t, half) : 0.0;
    }
    return a / half;
  }
  // sqrt(sum over the distinct values of count^2) for the n values value(k): the growth of a
  // running sum whose terms repeat. Adding a term t to a running sum S on the grid of spacing U
  // (S's binade) errs by an amount fixed by t mod U: every copy of t added within a binade errs
  // the same way, so the errors of one value add with one sign, and only the distinct values'
  // errors spread. With each value once this is sqrt(n), the growth of independent roundings; with
  // n copies of one value, n. Low-precision inputs repeat: a bfloat16 row of 15,298 logits holds
  // about 155 distinct values, and a single-thread fp32 loop over its exp terms erred by 271 u
  // (2.2 sqrt(n)) where this gives 1,245 (docs/error-model.md, "Correlated rounding").
  template <class Value>
  static double repeat_growth(std::int64_t n, Value&& value) {
    // Counted in one pass over an open-addressed table of the values' bits (+0 and -0 one value,
    // as == has them): O(n), where sorting a copy cost several times the softmax row it bounds.
    if (n <= 1) return n == 1 && std::isfinite(value(0)) ? 1.0 : 0.0;
    std::size_t cap = 16;
    while (cap < 2 * static_cast<std::size_t>(n)) cap *= 2;
    thread_local std::vector<std::uint64_t> keys;
    thread_local std::vector<std::uint32_t> counts;
    constexpr std::uint64_t k_empty = 0x7ff8dead00000000ULL;  // a NaN: never a finite value's bits
    keys.assign(cap, k_empty);
    counts.resize(cap);
    const int shift = 64 - std::countr_zero(cap);
    double squares = 0.0;
    for (std::int64_t k = 0; k < n; ++k) {
      const double x = value(k);
      if (!std::isfinite(x)) continue;
      const std::uint64_t bits = std::bit_cast<std::uint64_t>(x == 0.0 ? 0.0 : x);
      std::size_t h = static_cast<std::size_t>((bits * 0x9E3779B97F4A7C15ULL) >> shift);
      while (keys[h] != k_empty && keys[h] != bits) h = (h + 1) & (cap - 1);
      if (keys[h] == k_empty) keys[h] = bits, counts[h] = 0;
      squares += 2.0 * counts[h]++ + 1.0;  // (c + 1)^2 - c^2
    }
    return std::sqrt(squares);
  }
  void add_range(double lo, double hi, double abs_sum) {
    lo_ = std::min(lo_, lo);
    hi_ = std::max(hi_, hi);
    abs_sum_ += abs_sum;
  }
  double abs_sum() const { return abs_sum_; }
  double growth(double n) const { return growth(n, abs_sum_ / n, hi_ - lo_); }
  static double growth(double n, double mean_abs, double spread) {
    const double root = std::sqrt(n);
    if (!(n > 1.0) || !(mean_abs > 0.0) || !std::isfinite(mean_abs) || !std::isfinite(spread))
      return root;
    const double k_star = spread / (32.0 * 0x1p-24 * mean_abs);
    return k_star >= n ? root : root + (n * n - k_star * k_star) / (2.0 * n);
  }

 private:
  double lo_ = std::numeric_limits<double>::infinity(), hi_ = 0.0, abs_sum_ = 0.0;
  double run_absorbed_ = 0.0;
};

// Pairwise (tree) sum of buf[0, n), in place: how tl.sum / a warp-shuffle reduction adds a tile.
inline float tree_sum(float* buf, std::int64_t n) {
  for (std::int64_t width = 1; width < n; width *= 2)
    for (std::int64_t i = 0; i + width < n; i += 2 * width) buf[i] += buf[i + width];
  return n > 0 ? buf[0] : 0.0f;
}

// How an emulated kernel sums `len` fp32 terms of a row.
enum class RowSum {
  tiled,         // fp32: each `block`-wide tile summed as a tree, tile sums added to an fp32 acc
  lanes,         // fp32: 32 lanes each summing k = lane (mod 32) in sequence, then a tree (a warp
                 // per row). Sequential chains stay short, as in GPU reductions (a single-thread
                 // loop over near-constant terms has correlated roundings that grow like len: the
                 // references cover it with SumGrowth, and tests/python/test_conformance.py
                 // fuzzes such loops against them).
  split,         // fp32: the row split over 8 CTAs, each a running sum, partials added at the end
  lowp,          // bug: one running sum rounded to the input dtype after every add (`scalar_t acc`)
  tail_dropped,  // bug: only len / block full tiles are read; the partial tail tile never is
  overwrite,     // bug: `acc = tile_sum` instead of `acc += tile_sum`: only the last tile survives
};

constexpr std::int64_t k_max_block = 4096;

// Sum over k in [0, len) of term(k) (a float), the way `how` forms it. `dtype` is the input dtype
// (used by RowSum::lowp).
template <class Term>
float row_sum(std::int64_t len, RowSum how, std::int64_t block, DType dtype, Term&& term) {
  switch (how) {
    case RowSum::lanes: {
      std::array<float, 32> lane{};
      for (std::int64_t k = 0; k < len; ++k) lane[static_cast<std::size_t>(k % 32)] += term(k);
      return tree_sum(lane.data(), std::min<std::int64_t>(len, 32));
    }
    case RowSum::lowp: {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < len; ++k) acc = store_as(dtype, acc + term(k));
      return acc;
    }
    case RowSum::split: {
      constexpr std::int64_t parts = 8;
      const std::int64_t chunk = (len + parts - 1) / parts;
      float total = 0.0f;
      for (std::int64_t p = 0; p * chunk < len; ++p) {
        float part = 0.0f;
        for (std::int64_t k = p * chunk; k < std::min(len, (p + 1) * chunk); ++k) part += term(k);
        total += part;
      }
      return total;
    }
    case RowSum::tiled:
    case RowSum::tail_dropped:
    case RowSum::overwrite: {
      std::array<float, k_max_block> buf;
      block = std::clamp<std::int64_t>(block, 1, k_max_block);
      const std::int64_t end = how == RowSum::tail_dropped ? len / block * block : len;
      float acc = 0.0f;
      for (std::int64_t t = 0; t < end; t += block) {
        const std::int64_t n = std::min(block, end - t);
        for (std::int64_t k = 0; k < n; ++k) buf[static_cast<std::size_t>(k)] = term(t + k);
        const float s = tree_sum(buf.data(), n);
        acc = how == RowSum::overwrite ? s : acc + s;
      }
      return acc;
    }
  }
  return 0.0f;
}

// Mean and sum of squared deviations of a row in fp32 by Welford's algorithm: `lanes` lanes each
// run Welford over the elements k = lane (mod lanes), then the lanes merge pairwise (Chan et al.),
// as a Triton/CUDA Welford reduction does.
struct Moments {
  float count = 0.0f, mean = 0.0f, m2 = 0.0f;
};

inline Moments merge_moments(const Moments& a, const Moments& b) {
  if (a.count == 0.0f) return b;
  if (b.count == 0.0f) return a;
  Moments m;
  m.count = a.count + b.count;
  const float delta = b.mean - a.mean;
  const float wb = b.count / m.count;
  m.mean = a.mean + delta * wb;
  m.m2 = a.m2 + b.m2 + delta * delta * a.count * wb;
  return m;
}

template <class Load>
Moments welford_row(std::int64_t len, std::int64_t lanes, Load&& load) {
  std::vector<Moments> lane(
      static_cast<std::size_t>(std::max<std::int64_t>(1, std::min(lanes, len))));
  const auto nl = static_cast<std::int64_t>(lane.size());
  for (std::int64_t k = 0; k < len; ++k) {
    Moments& m = lane[static_cast<std::size_t>(k % nl)];
    const float x = load(k);
    m.count += 1.0f;
    const float delta = x - m.mean;
    m.mean += delta / m.count;
    m.m2 += delta * (x - m.mean);
  }
  for (std::int64_t width = 1; width < nl; width *= 2)
    for (std::int64_t i = 0; i + width < nl; i += 2 * width)
      lane[static_cast<std::size_t>(i)] = merge_moments(lane[static_cast<std::size_t>(i)],
                                                        lane[static_cast<std::size_t>(i + width)]);
  return lane[0];
}

// The smallest multiple of `block` >= n (a padded length), at least `block`.
inline std::int64_t padded_length(std::int64_t n, std::int64_t block) {
  return std::max<std::int64_t>(block, (n + block - 1) / block * block);
}

}  // namespace gpuemu::ops
