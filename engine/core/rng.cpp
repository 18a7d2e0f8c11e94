#include "gpuemu/engine/rng.hpp"

#include <cmath>

namespace gpuemu {

std::uint64_t splitmix64_next(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ULL;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t derive_seed(std::uint64_t parent, std::string_view domain) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 of the domain's bytes
  for (unsigned char c : domain) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  std::uint64_t state = parent ^ h;
  return splitmix64_next(state);
}

Rng::Rng(std::uint64_t seed) {
  std::uint64_t state = seed;
  m_s0 = splitmix64_next(state);
  m_s1 = splitmix64_next(state);
  if (m_s0 == 0 && m_s1 == 0) m_s0 = 1;  // the all-zero state is a fixed point
}

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform01(); }

std::uint64_t Rng::bounded(std::uint64_t n) {
  if (n <= 1) return 0;
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const std::uint64_t r = next_u64();
    if (r >= threshold) return r % n;
  }
}

std::int64_t Rng::integer(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return lo;
  const auto span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) + 1;
  if (span == 0) return static_cast<std::int64_t>(next_u64());  // the whole int64 range
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + bounded(span));
}

double det_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752) {
    m = m * 2.0;
    e = e - 1;
  }
  // log(m) = 2 atanh(z), z = (m-1)/(m+1), |z| <= 0.1716; 21 odd terms reach double precision.
  const double z = (m - 1.0) / (m + 1.0);
  const double z2 = z * z;
  double p = 1.0 / 41.0;
  for (int k = 19; k >= 0; --k) p = p * z2 + 1.0 / static_cast<double>(2 * k + 1);
  return static_cast<double>(e) * 0.6931471805599453 + 2.0 * z * p;
}

double Rng::normal() {
  for (;;) {
    const double u = 2.0 * uniform01() - 1.0;
    const double v = 2.0 * uniform01() - 1.0;
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * det_log(s) / s);
  }
}

namespace {

// det_log's series and the polar method's last step over a block, as vectors. The operations and
// their order are det_log's and normal()'s, element by element (IEEE +, -, *, / and sqrt are
// correctly rounded in every lane, and nothing is contracted into an FMA), so every lane gives the
// bits the scalar path gives. m in [0.5, 1) and e are frexp's; det_log's adjustment (m < 1/sqrt 2:
// m * 2, e - 1, both exact) is made here, lane by lane, with a select instead of a branch taken
// about half the time.
using v4d = double __attribute__((vector_size(32)));

// 1 / (2k + 1) for k = 0..19, det_log's series coefficients (the same correctly rounded doubles the
// loops' 1.0 / (2k + 1) give).
constexpr double k_odd_reciprocals[20] = {
    1.0 / 1,  1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11, 1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19,
    1.0 / 21, 1.0 / 23, 1.0 / 25, 1.0 / 27, 1.0 / 29, 1.0 / 31, 1.0 / 33, 1.0 / 35, 1.0 / 37, 1.0 / 39};

[[gnu::always_inline]] inline void polar_tail(const double* m, const double* e, const double* u, const double* s,
                       double* out, std::size_t n) {
  std::size_t i = 0;
  // Four vectors at a time: the series is a chain of 20 dependent multiply-adds per value, so one
  // vector at a time waits on each step's latency; four independent chains fill the pipeline.
  // (Each lane's operations and their order are unchanged.)
  for (; i + 16 <= n; i += 16) {
    v4d m0, m1, m2, m3, e0, e1, e2, e3;
    const auto load = [&](v4d& mv, v4d& ev, std::size_t at) {
      __builtin_memcpy(&mv, m + at, sizeof(v4d));
      __builtin_memcpy(&ev, e + at, sizeof(v4d));
      const auto low = mv < 0.70710678118654752;
      mv = low ? mv * 2.0 : mv;
      ev = low ? ev - 1.0 : ev;
    };
    load(m0, e0, i);
    load(m1, e1, i + 4);
    load(m2, e2, i + 8);
    load(m3, e3, i + 12);
    const v4d z0 = (m0 - 1.0) / (m0 + 1.0), z1 = (m1 - 1.0) / (m1 + 1.0);
    const v4d z2_ = (m2 - 1.0) / (m2 + 1.0), z3 = (m3 - 1.0) / (m3 + 1.0);
    const v4d q0 = z0 * z0, q1 = z1 * z1, q2 = z2_ * z2_, q3 = z3 * z3;
    v4d p0 = v4d{} + 1.0 / 41.0, p1 = p0, p2 = p0, p3 = p0;
    for (int k = 19; k >= 0; --k) {  // registers, not memory: four independent chains
      const double c = k_odd_reciprocals[k];
      p0 = p0 * q0 + c;
      p1 = p1 * q1 + c;
      p2 = p2 * q2 + c;
      p3 = p3 * q3 + c;
    }
    const auto store = [&](const v4d& ev, const v4d& z, const v4d& p, std::size_t at) {
      v4d sv;
      __builtin_memcpy(&sv, s + at, sizeof sv);
      const v4d log_s = ev * 0.6931471805599453 + 2.0 * z * p;
      const v4d t = -2.0 * log_s / sv;
      __builtin_memcpy(out + at, &t, sizeof t);
    };
    store(e0, z0, p0, i);
    store(e1, z1, p1, i + 4);
    store(e2, z2_, p2, i + 8);
    store(e3, z3, p3, i + 12);
  }
  for (; i + 4 <= n; i += 4) {
    v4d mv, ev, sv;
    __builtin_memcpy(&mv, m + i, sizeof mv);
    __builtin_memcpy(&ev, e + i, sizeof ev);
    __builtin_memcpy(&sv, s + i, sizeof sv);
    const auto low = mv < 0.70710678118654752;
    mv = low ? mv * 2.0 : mv;
    ev = low ? ev - 1.0 : ev;
    const v4d z = (mv - 1.0) / (mv + 1.0);
    const v4d z2 = z * z;
    v4d p = v4d{} + 1.0 / 41.0;
    for (int k = 19; k >= 0; --k) p = p * z2 + 1.0 / static_cast<double>(2 * k + 1);
    const v4d log_s = ev * 0.6931471805599453 + 2.0 * z * p;
    const v4d t = -2.0 * log_s / sv;
    __builtin_memcpy(out + i, &t, sizeof t);
  }
  for (; i < n; ++i) {
    const bool low = m[i] < 0.70710678118654752;
    const double mi = low ? m[i] * 2.0 : m[i], ei = low ? e[i] - 1.0 : e[i];
    const double z = (mi - 1.0) / (mi + 1.0);
    const double z2 = z * z;
    double p = 1.0 / 41.0;
    for (int k = 19; k >= 0; --k) p = p * z2 + 1.0 / static_cast<double>(2 * k + 1);
    out[i] = -2.0 * (ei * 0.6931471805599453 + 2.0 * z * p) / s[i];
  }
  for (std::size_t j = 0; j < n; ++j) out[j] = u[j] * std::sqrt(out[j]);
}

[[gnu::target("avx2")]] void polar_tail_avx2(const double* m, const double* e, const double* u,
                                             const double* s, double* out, std::size_t n) {
  polar_tail(m, e, u, s, out, n);
}

void polar_tail_base(const double* m, const double* e, const double* u, const double* s,
                     double* out, std::size_t n) {
  polar_tail(m, e, u, s, out, n);
}

const bool k_has_avx2 = __builtin_cpu_supports("avx2");

}  // namespace

void Rng::finish_block(const PolarBlock& b, double* out, std::size_t n) {
  (k_has_avx2 ? polar_tail_avx2 : polar_tail_base)(b.m, b.e, b.u, b.s, out, n);
}

void Rng::normals(double* out, std::size_t n) { normals_then(out, n, NoDraws{}); }

std::size_t Rng::weighted(std::span<const std::uint64_t> weights) {
  std::uint64_t total = 0;
  for (auto w : weights) total += w;
  std::uint64_t r = bounded(total);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (r < weights[i]) return i;
    r -= weights[i];
  }
  return weights.size() - 1;
}

}  // namespace gpuemu
