// Reproducible randomness: xorshift128+ seeded through splitmix64, with named sub-streams.
// The exact algorithm (every constant and every step of turning u64 draws into values) is in
// docs/rng.md; python/gpuemu/rng.py reproduces it bit for bit, and tests/data/rng_vectors.json
// holds the vectors both test suites check.
//
// Every value transform uses only IEEE-exact operations (+, -, *, /, sqrt, ldexp, frexp) in a fixed
// order, and the build disables FMA contraction, so the same seed gives the same bits everywhere.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

namespace gpuemu {

// One splitmix64 step: advances `state` and returns the mixed output.
std::uint64_t splitmix64_next(std::uint64_t& state);

// The seed of the sub-stream named `domain` under `parent` (e.g. derive_seed(case_seed, "dim:N")).
// Independent of which other streams were derived, and of the order they were derived in.
std::uint64_t derive_seed(std::uint64_t parent, std::string_view domain);

class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  // The stream named `domain` under `parent`: Rng(derive_seed(parent, domain)).
  static Rng substream(std::uint64_t parent, std::string_view domain) {
    return Rng(derive_seed(parent, domain));
  }

  std::uint64_t next_u64() {  // inline: the value generator draws millions a case
    std::uint64_t s1 = m_s0;
    const std::uint64_t s0 = m_s1;
    const std::uint64_t result = s0 + s1;
    m_s0 = s0;
    s1 ^= s1 << 23;
    m_s1 = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi);
  // Uniform integer in [0, n), n >= 1, unbiased (rejection).
  std::uint64_t bounded(std::uint64_t n);
  // Uniform integer in [lo, hi] inclusive.
  std::int64_t integer(std::int64_t lo, std::int64_t hi);
  // Standard normal (Marsaglia's polar method with gpuemu's own log; see docs/rng.md).
  double normal();
  // n successive normal() values into out, bit for bit, drawing exactly the same u64s: the value
  // generator's bulk path (det_log's series runs over a block of values at a time, SIMD, instead
  // of one dependent chain per value).
  void normals(double* out, std::size_t n);
  // n normals into out drawn as `for i: out[i] = normal(); then(i);` would draw them, where then(i)
  // makes the draws that interleave with the normals in the stream (a chance() per element, say):
  // the same u64s in the same order, the same bits, with the log series over blocks as in
  // normals(). then(i) may draw from this Rng and record what it drew, but must not read out[i]:
  // a block's values are finished after its last then().
  template <class Then>
  void normals_then(double* out, std::size_t n, Then&& then);
  // True with probability num/den (integers, so no rounding question arises).
  bool chance(std::uint64_t num, std::uint64_t den) { return bounded(den) < num; }
  // An index drawn with integer weights (sum > 0).
  std::size_t weighted(std::span<const std::uint64_t> weights);

 private:
  // One try of the polar method's draws into slot i of a block: u, s = u^2 + v^2 and frexp(s), read
  // off its bits (u and v are multiples of 2^-52, so an accepted s >= 2^-104 is a normal double;
  // for a rejected s the slot holds garbage and the next try overwrites it). Whether 0 < s < 1.
  // finish_block() turns a block into values (det_log's adjustment of m included).
  static constexpr std::size_t k_block = 256;
  struct PolarBlock {
    double m[k_block], e[k_block], u[k_block], s[k_block];
  };
  struct NoDraws {
    void operator()(std::size_t) const {}
  };
  bool polar_try(PolarBlock& b, std::size_t i) {
    const double uu = 2.0 * uniform01() - 1.0;
    const double vv = 2.0 * uniform01() - 1.0;
    const double ss = uu * uu + vv * vv;
    std::uint64_t bits;
    __builtin_memcpy(&bits, &ss, sizeof bits);
    const auto biased = static_cast<int>((bits >> 52) & 0x7ff);
    bits = (bits & ~(std::uint64_t{0x7ff} << 52)) | (std::uint64_t{1022} << 52);
    __builtin_memcpy(&b.m[i], &bits, sizeof bits);  // frexp's fraction, in [0.5, 1)
    b.e[i] = static_cast<double>(biased - 1022);      // ... and its exponent
    b.u[i] = uu;
    b.s[i] = ss;
    return ss > 0.0 && ss < 1.0;
  }
  static void finish_block(const PolarBlock& b, double* out, std::size_t n);

  std::uint64_t m_s0;
  std::uint64_t m_s1;
};

template <class Then>
void Rng::normals_then(double* out, std::size_t n, Then&& then) {
  PolarBlock block;
  for (std::size_t at = 0; at < n; at += k_block) {
    const std::size_t b = n - at < k_block ? n - at : k_block;
    if constexpr (std::is_same_v<std::decay_t<Then>, NoDraws>) {
      for (std::size_t i = 0; i < b;) i += polar_try(block, i) ? 1 : 0;  // no branch to mispredict
    } else {
      for (std::size_t i = 0; i < b;)
        if (polar_try(block, i)) then(at + i++);
    }
    finish_block(block, out + at, b);
  }
}

// Natural logarithm of x > 0, finite, computed only with IEEE-exact operations in a fixed order
// (frexp, then an atanh series of fixed length). Accurate to a few ulp; identical on every machine.
double det_log(double x);

}  // namespace gpuemu
