#include "gpuemu/rng.hpp"

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

std::uint64_t Rng::next_u64() {
  std::uint64_t s1 = m_s0;
  const std::uint64_t s0 = m_s1;
  const std::uint64_t result = s0 + s1;
  m_s0 = s0;
  s1 ^= s1 << 23;
  m_s1 = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
  return result;
}

double Rng::uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

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
