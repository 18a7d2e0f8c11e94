// exp(x) in double, four lanes at a time, for the fp64 reference loops (softmax, log_softmax):
// table-free, branch-free, within 1 ulp of the exact value (tests/cpp/vec_exp_test.cpp checks
// it against std::exp over tens of millions of values, subnormal results and special values
// included), and bit-identical whichever instruction set GCC lowers the vector type to (no FMA:
// the tree builds with -ffp-contract=off, so a * b + c rounds twice on every machine).
//
// Method (Cody and Waite's reduction, as in fdlibm):
//   k = round(x / ln2), r = (x - k * ln2_hi) - k * ln2_lo, |r| <= ln2 / 2 (+ 1e-13),
//   exp(r) = 1 + r + r^2 * P(r), P the Taylor series of (exp(r) - 1 - r) / r^2 to r^11
//            (the first term left out is r^14 / 14! < 6e-18 relative: 0.05 ulp),
//   exp(x) = exp(r) * 2^k1 * 2^k2 with k1 + k2 = k, each a normal power of two, so that results
//            in the subnormal range are rounded once (by the second product) and overflow gives
//            +inf exactly where the exact value exceeds DBL_MAX (to within the 1 ulp above).
//   ln2_hi has 32 significant bits, so k * ln2_hi is exact for |k| < 2^21 and x - k * ln2_hi is
//   exact (Sterbenz); x is clamped to [-746, 710] first (beyond that exp is 0 or +inf anyway).
// Special values as std::exp: exp(-inf) = +0, exp(+inf) = +inf, exp(NaN) = NaN (the same NaN),
// exp(+-0) = 1 exactly, exp(x) = 0 below -745.13 and +inf above 709.78.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Every function here is always inlined, so the warning that a 32-byte vector passed by value
// changes the ABI without AVX does not apply; it is turned off for the files that include this
// one too (it fires where they call these functions).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace gpuemu::ops {

// Four doubles; GCC lowers the arithmetic to whatever the target has (2 x SSE2, or AVX).
using vd4 = double __attribute__((vector_size(32)));
using vu4 = std::uint64_t __attribute__((vector_size(32)));

// The instruction set a loop using vd4 is compiled for (op_util.hpp: the reference loops are
// compiled for both and pick one at run time), where the best way to write an operation differs
// between them while giving the same bits.
enum class Isa { baseline, avx2 };

// Unaligned loads and stores of four doubles.
[[gnu::always_inline]] inline vd4 load4(const double* p) {
  vd4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store4(double* p, vd4 v) {
  std::memcpy(p, &v, sizeof v);
}
// An elementwise loop over [0, n): four(k) for groups of four, then one(k) for the tail. (Plain
// stores: streaming stores, tried, made layer_norm 5x slower on our VMs.)
template <class One, class Four>
[[gnu::always_inline]] inline void elementwise(std::int64_t n, One&& one, Four&& four) {
  std::int64_t k = 0;
  for (; k + 4 <= n; k += 4) four(k);
  for (; k < n; ++k) one(k);
}
[[gnu::always_inline]] inline vd4 splat4(double c) {
  return vd4{c, c, c, c};
}
// |v| lane by lane (clears the sign bits, as std::fabs).
[[gnu::always_inline]] inline vd4 vabs(vd4 v) {
  constexpr std::uint64_t k_mag = ~(std::uint64_t{1} << 63);
  return reinterpret_cast<vd4>(reinterpret_cast<vu4>(v) & k_mag);
}

namespace vexp_detail {

inline constexpr double k_log2e = 0x1.71547652b82fep0;
inline constexpr double k_ln2_hi = 0x1.62e42feep-1;        // 32 significant bits
inline constexpr double k_ln2_lo = 0x1.a39ef35793c76p-33;  // ln2 - ln2_hi, rounded
inline constexpr double k_round = 0x1.8p52;                // x + 1.5 * 2^52 - 1.5 * 2^52 = rint(x)
inline constexpr double k_bias = 0x1.8p52 + 1023.0;        // its low bits: k + 1023
inline constexpr double k_lo_clamp = -746.0, k_hi_clamp = 710.0;

[[gnu::always_inline]] inline std::uint64_t as_bits(double x) {
  return std::bit_cast<std::uint64_t>(x);
}
[[gnu::always_inline]] inline vu4 as_bits(vd4 x) {
  return reinterpret_cast<vu4>(x);
}
[[gnu::always_inline]] inline double as_double(std::uint64_t b) {
  return std::bit_cast<double>(b);
}
[[gnu::always_inline]] inline vd4 as_double(vu4 b) {
  return reinterpret_cast<vd4>(b);
}
template <class D>
[[gnu::always_inline]] inline D splat(double c) {
  if constexpr (sizeof(D) == sizeof(double))
    return c;
  else
    return splat4(c);
}

// 2^k for an integral double k in [-1022, 1023]: its exponent field built from k + 1023.
template <class D>
[[gnu::always_inline]] inline D pow2(D k) {
  return as_double(as_bits(k + k_bias) << 52);
}

// mask ? a : b, lane by lane, for a comparison's mask (all ones or all zeros per lane). Written
// with bit operations: GCC lowers a vector `?:` on doubles to scalar branches on SSE2.
[[gnu::always_inline]] inline double blend(bool mask, double a, double b) {
  return mask ? a : b;
}
template <class M>
[[gnu::always_inline]] inline vd4 blend(M mask, vd4 a, vd4 b) {
  const vu4 m = reinterpret_cast<vu4>(mask);
  return as_double((as_bits(a) & m) | (as_bits(b) & ~m));
}

// x clamped to [k_lo_clamp, k_hi_clamp]; NaN compares false, so it stays NaN. With AVX, GCC lowers
// the `?:` on vd4 to vmaxpd / vminpd, whose semantics are exactly these (the second operand where
// either is NaN): exp is 12% faster than with the bit operations of blend(). On the SSE2 baseline
// it lowers a `?:` on vd4 lane by lane, slower than blend(). Same bits either way.
template <Isa I, class D>
[[gnu::always_inline]] inline D clamp_arg(D x) {
  if constexpr (I == Isa::avx2 && !std::is_same_v<D, double>) {
    const D lo = splat<D>(k_lo_clamp), hi = splat<D>(k_hi_clamp);
    const D xc = x < lo ? lo : x;
    return xc > hi ? hi : xc;
  } else {
    const D xc = blend(x < k_lo_clamp, splat<D>(k_lo_clamp), x);
    return blend(xc > k_hi_clamp, splat<D>(k_hi_clamp), xc);
  }
}

template <Isa I, class D>
[[gnu::always_inline]] inline D exp_impl(D x) {
  const D xc = clamp_arg<I>(x);
  const D k = (xc * k_log2e + k_round) - k_round;
  const D r = (xc - k * k_ln2_hi) - k * k_ln2_lo;
  // P(r) = sum_{j>=2} r^(j-2) / j!, to j = 13, by Horner.
  D p = splat<D>(1.0 / 6227020800.0);
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  const D e = ((r * r) * p + r) + 1.0;
  const D k1 = (k * 0.5 + k_round) - k_round;  // k = k1 + k2, both in [-538, 512]
  const D y = (e * pow2(k1)) * pow2(k - k1);
  return blend(x != x, x + x, y);
}

}  // namespace vexp_detail

// mask ? a : b lane by lane, for the mask of a comparison of vd4 (a < b, a != a, ...).
template <class M>
[[gnu::always_inline]] inline vd4 select4(M mask, vd4 a, vd4 b) {
  return vexp_detail::blend(mask, a, b);
}

// exp of four lanes, written for the instruction set the caller is compiled for (the same bits
// for either).
template <Isa I = Isa::baseline>
[[gnu::always_inline]] inline vd4 vexp(vd4 x) {
  return vexp_detail::exp_impl<I>(x);
}
// exp of one value, bit-identical to a lane of vexp.
[[gnu::always_inline]] inline double vexp1(double x) {
  return vexp_detail::exp_impl<Isa::baseline>(x);
}

}  // namespace gpuemu::ops
