// Dtype conversions, exhaustively: every bit pattern of float16, bfloat16, float8_e4m3fn and
// float8_e5m2 decodes to what an independent decoder says and re-encodes to itself, and millions of
// doubles (random bits, every kind of rounding midpoint, subnormals, overflow thresholds, +-0,
// +-Inf, NaN) encode exactly as a brute-force oracle written here says: the nearest value of the
// format's sorted finite values (found by binary search), ties to the even mantissa, overflow per
// the format's rule (docs/dtypes.md).
#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/engine/rng.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using gpuemu::DType;
using gpuemu::Overflow;
using gpuemu::Rng;

constexpr double k_inf = std::numeric_limits<double>::infinity();
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

// A format as the test understands it, written down independently of dtype.cpp.
struct Format {
  const char* name;
  DType dtype;
  int bits;  // 8 or 16
  int exp_bits;
  int man_bits;
  int bias;
  bool has_inf;  // IEEE-style specials (all-ones exponent = Inf/NaN); false: e4m3fn
  std::uint32_t canonical_nan;
};

constexpr Format k_f16{"float16", DType::float16, 16, 5, 10, 15, true, 0x7E00};
constexpr Format k_bf16{"bfloat16", DType::bfloat16, 16, 8, 7, 127, true, 0x7FC0};
constexpr Format k_e4m3fn{"float8_e4m3fn", DType::float8_e4m3fn, 8, 4, 3, 7, false, 0x7F};
constexpr Format k_e5m2{"float8_e5m2", DType::float8_e5m2, 8, 5, 2, 15, true, 0x7E};
const std::array<Format, 4> k_formats = {k_f16, k_bf16, k_e4m3fn, k_e5m2};

std::uint32_t sign_bit(const Format& f) {
  return 1u << (f.bits - 1);
}

// The value of a bit pattern, from the textbook definition.
double reference_decode(const Format& f, std::uint32_t p) {
  const bool neg = (p & sign_bit(f)) != 0;
  const std::uint32_t field = (p >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const std::uint32_t mant = p & ((1u << f.man_bits) - 1);
  const std::uint32_t all_ones = (1u << f.exp_bits) - 1;
  double v;
  if (f.has_inf && field == all_ones) {
    v = mant == 0 ? k_inf : k_nan;
  } else if (!f.has_inf && field == all_ones && mant == (1u << f.man_bits) - 1) {
    v = k_nan;
  } else if (field == 0) {
    v = static_cast<double>(mant) * std::pow(2.0, 1 - f.bias - f.man_bits);
  } else {
    v = (1.0 + static_cast<double>(mant) / std::pow(2.0, f.man_bits)) *
        std::pow(2.0, static_cast<int>(field) - f.bias);
  }
  return neg ? -v : v;
}

// The library under test, one entry point per (format, overflow mode).
std::uint32_t encode(const Format& f, double x, Overflow mode) {
  std::array<std::byte, 2> buf{};
  gpuemu::encode_element(f.dtype, x, buf.data(), mode);
  const std::uint32_t via_element =
      f.bits == 8 ? static_cast<std::uint32_t>(buf[0])
                  : static_cast<std::uint32_t>(buf[0]) | (static_cast<std::uint32_t>(buf[1]) << 8);
  std::uint32_t direct = 0;
  switch (f.dtype) {
    case DType::float16:
      if (mode == Overflow::to_nan)
        direct = gpuemu::f64_to_f16_bits(x);
      else
        return via_element;
      break;
    case DType::bfloat16:
      if (mode == Overflow::to_nan)
        direct = gpuemu::f64_to_bf16_bits(x);
      else
        return via_element;
      break;
    case DType::float8_e4m3fn:
      direct = gpuemu::f64_to_e4m3fn_bits(x, mode);
      break;
    case DType::float8_e5m2:
      direct = gpuemu::f64_to_e5m2_bits(x, mode);
      break;
    default:
      break;
  }
  EXPECT_EQ(direct, via_element) << f.name << " encode_element disagrees with the bits function";
  return direct;
}

double decode(const Format& f, std::uint32_t p) {
  switch (f.dtype) {
    case DType::float16:
      return gpuemu::f16_bits_to_f64(static_cast<std::uint16_t>(p));
    case DType::bfloat16:
      return gpuemu::bf16_bits_to_f64(static_cast<std::uint16_t>(p));
    case DType::float8_e4m3fn:
      return gpuemu::e4m3fn_bits_to_f64(static_cast<std::uint8_t>(p));
    case DType::float8_e5m2:
      return gpuemu::e5m2_bits_to_f64(static_cast<std::uint8_t>(p));
    default:
      return k_nan;
  }
}

bool same_double(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// The brute-force oracle: the table of non-negative finite values in pattern order (pattern i has
// value table[i]), plus one virtual entry past the largest finite value (one ulp further) whose
// pattern is max+1, standing for "overflow".
struct Oracle {
  Format f;
  std::vector<double> table;  // table[0] = 0, ..., table[k-1] = max finite, table[k] = virtual
  std::uint32_t max_bits = 0;

  explicit Oracle(const Format& fmt) : f(fmt) {
    for (std::uint32_t p = 0; p < sign_bit(f); ++p) {
      const double v = reference_decode(f, p);
      if (!std::isfinite(v)) break;  // the finite patterns are exactly a prefix
      table.push_back(v);
    }
    max_bits = static_cast<std::uint32_t>(table.size() - 1);
    const double ulp = table[max_bits] - table[max_bits - 1];
    table.push_back(table[max_bits] + ulp);
  }

  std::uint32_t overflow(std::uint32_t sign, Overflow mode) const {
    if (mode == Overflow::saturate) return sign | max_bits;
    if (f.has_inf) return sign | (((1u << f.exp_bits) - 1) << f.man_bits);
    return sign | f.canonical_nan;
  }

  // Expected bits for x; for NaN, the canonical NaN with x's sign.
  std::uint32_t expected(double x, Overflow mode) const {
    const std::uint32_t sign = std::signbit(x) ? sign_bit(f) : 0u;
    if (std::isnan(x)) return sign | f.canonical_nan;
    const double a = std::fabs(x);
    if (a >= table.back()) return overflow(sign, mode);  // includes Inf
    // table[i] <= a < table[i+1]
    const auto i = static_cast<std::uint32_t>(std::upper_bound(table.begin(), table.end(), a) -
                                              table.begin() - 1);
    std::uint32_t pick;
    if (a == table[i]) {
      pick = i;
    } else {
      const double mid = (table[i] + table[i + 1]) / 2;  // exact: few significant bits
      if (a < mid)
        pick = i;
      else if (a > mid)
        pick = i + 1;
      else
        pick = (i % 2 == 0) ? i : i + 1;  // tie: the even mantissa
    }
    if (pick > max_bits) return overflow(sign, mode);
    return sign | pick;
  }
};

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}
std::string dbl(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a (%.17g)", x, x);
  return buf;
}

// ---- every bit pattern ----

TEST(DtypeExhaustive, DecodeMatchesTextbookDefinition) {
  for (const auto& f : k_formats) {
    for (std::uint32_t p = 0; p < (1u << f.bits); ++p)
      ASSERT_TRUE(same_double(decode(f, p), reference_decode(f, p))) << f.name << " " << hex(p);
  }
}

TEST(DtypeExhaustive, EveryPatternRoundTrips) {
  for (const auto& f : k_formats) {
    const Oracle o(f);
    int nans = 0;
    for (std::uint32_t p = 0; p < (1u << f.bits); ++p) {
      const double v = decode(f, p);
      for (Overflow mode : {Overflow::to_nan, Overflow::saturate}) {
        const std::uint32_t back = encode(f, v, mode);
        if (std::isnan(v)) {
          ASSERT_TRUE(std::isnan(decode(f, back))) << f.name << " NaN " << hex(p);
        } else if (std::isinf(v) && mode == Overflow::saturate) {
          ASSERT_EQ(back, (p & sign_bit(f)) | o.max_bits) << f.name << " Inf saturates";
        } else {
          ASSERT_EQ(back, p) << f.name << " pattern " << hex(p) << " value " << dbl(v);
        }
      }
      nans += std::isnan(v);
    }
    // NaN patterns: all-ones exponent with a non-zero mantissa; e4m3fn only S.1111.111.
    const int expected_nans = f.has_inf ? 2 * ((1 << f.man_bits) - 1) : 2;
    EXPECT_EQ(nans, expected_nans) << f.name;
  }
}

TEST(DtypeExhaustive, OrderingIsMonotonicAndSymmetric) {
  for (const auto& f : k_formats) {
    const Oracle o(f);
    double prev = -1.0;
    for (std::uint32_t p = 0; p <= o.max_bits; ++p) {
      const double v = decode(f, p);
      ASSERT_GT(v, prev) << f.name << " " << hex(p);
      prev = v;
      const double neg = decode(f, p | sign_bit(f));
      ASSERT_TRUE(same_double(neg, -v)) << f.name << " " << hex(p | sign_bit(f));
    }
    EXPECT_TRUE(std::signbit(decode(f, sign_bit(f)))) << f.name << ": -0 keeps its sign";
    if (f.has_inf) {
      EXPECT_EQ(decode(f, o.max_bits + 1), k_inf) << f.name;
      EXPECT_EQ(decode(f, sign_bit(f) | (o.max_bits + 1)), -k_inf) << f.name;
    }
  }
}

TEST(DtypeExhaustive, FormatFacts) {
  EXPECT_EQ(gpuemu::f16_bits_to_f64(0x7BFF), 65504.0);
  EXPECT_EQ(gpuemu::f16_bits_to_f64(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(gpuemu::f16_bits_to_f64(0x0400), std::ldexp(1.0, -14));
  EXPECT_EQ(gpuemu::bf16_bits_to_f64(0x7F7F), 0x1.FEp127);
  EXPECT_EQ(gpuemu::bf16_bits_to_f64(0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(gpuemu::e4m3fn_bits_to_f64(0x7E), 448.0);
  EXPECT_EQ(gpuemu::e4m3fn_bits_to_f64(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(gpuemu::e4m3fn_bits_to_f64(0x08), std::ldexp(1.0, -6));
  EXPECT_EQ(gpuemu::e4m3fn_bits_to_f64(0x78), 256.0);  // e4m3fn's top binade holds numbers
  EXPECT_TRUE(std::isnan(gpuemu::e4m3fn_bits_to_f64(0x7F)));
  EXPECT_TRUE(std::isnan(gpuemu::e4m3fn_bits_to_f64(0xFF)));
  EXPECT_EQ(gpuemu::e5m2_bits_to_f64(0x7B), 57344.0);
  EXPECT_EQ(gpuemu::e5m2_bits_to_f64(0x7C), k_inf);
  EXPECT_EQ(gpuemu::e5m2_bits_to_f64(0x01), std::ldexp(1.0, -16));
  for (const auto& f : k_formats) {
    const Oracle o(f);
    const auto& info = gpuemu::dtype_info(f.dtype);
    EXPECT_EQ(info.dtype, f.dtype);
    EXPECT_EQ(info.name, f.name);
    EXPECT_EQ(info.size * 8, static_cast<std::size_t>(f.bits));
    EXPECT_TRUE(info.is_floating);
    EXPECT_EQ(info.mantissa_bits, f.man_bits);
    EXPECT_EQ(info.unit_roundoff, std::ldexp(1.0, -(f.man_bits + 1))) << f.name;
    EXPECT_EQ(info.max_finite, o.table[o.max_bits]) << f.name;
    EXPECT_EQ(info.lowest, -o.table[o.max_bits]) << f.name;
    EXPECT_EQ(info.min_subnormal, o.table[1]) << f.name;
    EXPECT_EQ(info.min_normal, o.table[1u << f.man_bits]) << f.name;
  }
}

// ---- random doubles against the oracle ----

// A double drawn to stress format `o`: random bits, grid values, midpoints and their neighbours,
// values between grid points, the format's whole exponent range, double subnormals, specials.
double draw(Rng& r, const Oracle& o) {
  const auto k = static_cast<std::uint64_t>(o.table.size() - 1);  // patterns 0..max, virtual
  const double sign = r.chance(1, 2) ? -1.0 : 1.0;
  switch (r.bounded(9)) {
    case 0:
      return std::bit_cast<double>(r.next_u64());
    case 1:
      return sign * o.table[r.bounded(k + 1)];
    case 2: {
      const auto i = r.bounded(k);
      return sign * (o.table[i] + o.table[i + 1]) / 2;
    }
    case 3: {
      const auto i = r.bounded(k);
      const double mid = (o.table[i] + o.table[i + 1]) / 2;
      return sign * std::nextafter(mid, r.chance(1, 2) ? k_inf : 0.0);
    }
    case 4: {
      const auto i = r.bounded(k);
      return sign * (o.table[i] + (o.table[i + 1] - o.table[i]) * r.uniform01());
    }
    case 5: {
      // Any exponent from below the smallest subnormal to above the overflow threshold.
      const int lo = std::ilogb(o.table[1]) - 4, hi = std::ilogb(o.table.back()) + 3;
      return sign * std::ldexp(1.0 + r.uniform01(), static_cast<int>(r.integer(lo, hi)));
    }
    case 6: {
      // Double subnormals and the tiniest normals.
      return sign * std::ldexp(r.uniform01(), static_cast<int>(r.integer(-1074, -1000)));
    }
    case 7: {
      // Around the overflow threshold (the midpoint between the largest finite and the virtual).
      const double thr = (o.table[k - 1] + o.table[k]) / 2;
      const double span = o.table[k] - o.table[k - 1];
      return sign * (thr + span * (r.uniform01() - 0.5) *
                               std::ldexp(1.0, -static_cast<int>(r.bounded(40))));
    }
    default: {
      static const std::array<double, 14> specials = {
          0.0,
          k_inf,
          k_nan,
          std::bit_cast<double>(0x7FF0000000000001ULL),  // signalling-pattern NaN
          std::bit_cast<double>(0x7FFFFFFFFFFFFFFFULL),  // NaN with a full payload
          std::numeric_limits<double>::max(),
          std::numeric_limits<double>::min(),
          std::numeric_limits<double>::denorm_min(),
          1.0,
          std::nextafter(1.0, 2.0),
          std::nextafter(1.0, 0.0),
          o.table[1] / 2,                       // half the smallest subnormal: ties to 0
          std::nextafter(o.table[1] / 2, 1.0),  // just above: rounds up to it
          (o.table[k - 1] + o.table[k]) / 2,    // the overflow midpoint itself
      };
      return sign * specials[r.bounded(specials.size())];
    }
  }
}

void check_random(const Format& f, Overflow mode, std::uint64_t seed, int count) {
  const Oracle o(f);
  Rng r(seed);
  int failures = 0;
  for (int n = 0; n < count; ++n) {
    const double x = draw(r, o);
    const std::uint32_t want = o.expected(x, mode);
    const std::uint32_t got = encode(f, x, mode);
    if (got != want && ++failures <= 10)
      ADD_FAILURE() << f.name << (mode == Overflow::saturate ? " saturate" : " to_nan")
                    << ": x = " << dbl(x) << " encodes to " << hex(got) << ", oracle says "
                    << hex(want);
    // round_to is decode(encode) as a double.
    const double rounded = gpuemu::round_to(f.dtype, x, mode);
    if (!same_double(rounded, decode(f, want)) && ++failures <= 10)
      ADD_FAILURE() << f.name << " round_to(" << dbl(x) << ") = " << dbl(rounded);
  }
  EXPECT_EQ(failures, 0) << f.name << ": " << failures << " of " << count << " disagree";
}

TEST(DtypeRandom, Float16) {
  check_random(k_f16, Overflow::to_nan, 1, 2'000'000);
  check_random(k_f16, Overflow::saturate, 2, 500'000);
}
TEST(DtypeRandom, BFloat16) {
  check_random(k_bf16, Overflow::to_nan, 3, 2'000'000);
  check_random(k_bf16, Overflow::saturate, 4, 500'000);
}
TEST(DtypeRandom, Float8E4M3FN) {
  check_random(k_e4m3fn, Overflow::to_nan, 5, 1'000'000);
  check_random(k_e4m3fn, Overflow::saturate, 6, 1'000'000);
}
TEST(DtypeRandom, Float8E5M2) {
  check_random(k_e5m2, Overflow::to_nan, 7, 1'000'000);
  check_random(k_e5m2, Overflow::saturate, 8, 1'000'000);
}

// The oracle itself, on hand-checked cases, so a mistake in it cannot hide one in the library.
TEST(DtypeRandom, OracleHandChecked) {
  const Oracle h(k_f16), b(k_bf16), e4(k_e4m3fn), e5(k_e5m2);
  EXPECT_EQ(h.expected(65504.0, Overflow::to_nan), 0x7BFFu);
  EXPECT_EQ(h.expected(65519.99, Overflow::to_nan), 0x7BFFu);
  EXPECT_EQ(h.expected(65520.0, Overflow::to_nan), 0x7C00u);  // tie goes to even: Inf
  EXPECT_EQ(h.expected(65520.0, Overflow::saturate), 0x7BFFu);
  EXPECT_EQ(h.expected(1.0 + std::ldexp(1.0, -11), Overflow::to_nan), 0x3C00u);  // tie to even
  EXPECT_EQ(h.expected(1.0 + 3 * std::ldexp(1.0, -11), Overflow::to_nan), 0x3C02u);
  EXPECT_EQ(h.expected(std::ldexp(1.0, -25), Overflow::to_nan), 0x0000u);  // half min subnormal
  EXPECT_EQ(h.expected(-std::ldexp(1.0, -25), Overflow::to_nan), 0x8000u);
  EXPECT_EQ(h.expected(std::ldexp(1.5, -25), Overflow::to_nan), 0x0001u);
  EXPECT_EQ(b.expected(1.0 + std::ldexp(1.0, -8), Overflow::to_nan), 0x3F80u);
  EXPECT_EQ(b.expected(-k_nan, Overflow::to_nan), 0xFFC0u);
  EXPECT_EQ(e4.expected(448.0, Overflow::to_nan), 0x7Eu);
  EXPECT_EQ(e4.expected(464.0, Overflow::to_nan), 0x7Eu);  // tie: 448 (mantissa 110) is even
  EXPECT_EQ(e4.expected(464.5, Overflow::to_nan), 0x7Fu);  // rounds to 480: NaN
  EXPECT_EQ(e4.expected(-464.5, Overflow::to_nan), 0xFFu);
  EXPECT_EQ(e4.expected(464.5, Overflow::saturate), 0x7Eu);
  EXPECT_EQ(e4.expected(-k_inf, Overflow::to_nan), 0xFFu);
  EXPECT_EQ(e4.expected(-k_inf, Overflow::saturate), 0xFEu);
  EXPECT_EQ(e5.expected(61440.0, Overflow::to_nan), 0x7Cu);  // tie: 57344 has mantissa 11 (odd)
  EXPECT_EQ(e5.expected(61439.0, Overflow::to_nan), 0x7Bu);
  EXPECT_EQ(e5.expected(k_inf, Overflow::saturate), 0x7Bu);
}

// ---- the other dtypes ----

TEST(Dtype, Float32AndFloat64) {
  Rng r(9);
  for (int i = 0; i < 200'000; ++i) {
    const double x = std::bit_cast<double>(r.next_u64());
    ASSERT_TRUE(same_double(gpuemu::round_to(DType::float32, x),
                            static_cast<double>(static_cast<float>(x))));
    ASSERT_TRUE(same_double(gpuemu::round_to(DType::float64, x), x));
  }
  const double fmax = std::numeric_limits<float>::max();
  EXPECT_EQ(gpuemu::round_to(DType::float32, 1e39), k_inf);
  EXPECT_EQ(gpuemu::round_to(DType::float32, 1e39, Overflow::saturate), fmax);
  EXPECT_EQ(gpuemu::round_to(DType::float32, -k_inf, Overflow::saturate), -fmax);
  EXPECT_TRUE(std::isnan(gpuemu::round_to(DType::float32, k_nan, Overflow::saturate)));
  std::array<std::byte, 8> buf{};
  gpuemu::encode_element(DType::float32, 1.0 / 3.0, buf.data());
  float f;
  std::memcpy(&f, buf.data(), 4);
  EXPECT_EQ(f, 1.0f / 3.0f);
  EXPECT_EQ(gpuemu::decode_element(DType::float32, buf.data()), static_cast<double>(1.0f / 3.0f));
  gpuemu::encode_element(DType::float64, 1.0 / 3.0, buf.data());
  EXPECT_EQ(gpuemu::decode_element(DType::float64, buf.data()), 1.0 / 3.0);
  const auto& i32 = gpuemu::dtype_info(DType::float32);
  EXPECT_EQ(i32.max_finite, fmax);
  EXPECT_EQ(i32.min_subnormal, static_cast<double>(std::numeric_limits<float>::denorm_min()));
  EXPECT_EQ(i32.unit_roundoff, std::ldexp(1.0, -24));
  EXPECT_EQ(gpuemu::dtype_info(DType::float64).unit_roundoff, std::ldexp(1.0, -53));
}

TEST(Dtype, LittleEndianStorage) {
  std::array<std::byte, 2> buf{};
  gpuemu::encode_element(DType::bfloat16, 1.0, buf.data());
  EXPECT_EQ(buf[0], std::byte{0x80});
  EXPECT_EQ(buf[1], std::byte{0x3F});
  gpuemu::encode_element(DType::float16, -2.0, buf.data());
  EXPECT_EQ(buf[0], std::byte{0x00});
  EXPECT_EQ(buf[1], std::byte{0xC0});
  gpuemu::encode_element(DType::float8_e4m3fn, 1000.0, buf.data(), Overflow::saturate);
  EXPECT_EQ(buf[0], std::byte{0x7E});
}

TEST(Dtype, Integers) {
  struct Case {
    DType d;
    double x, want;
  };
  const Case cases[] = {
      {DType::int8, 2.5, 2},
      {DType::int8, 3.5, 4},
      {DType::int8, -2.5, -2},
      {DType::int8, -0.5, 0},
      {DType::int8, 300, 127},
      {DType::int8, -300, -128},
      {DType::int8, k_nan, 0},
      {DType::int8, k_inf, 127},
      {DType::int8, -k_inf, -128},
      {DType::uint8, -1, 0},
      {DType::uint8, 255.5, 255},
      {DType::uint8, 254.5, 254},
      {DType::int16, 40000, 32767},
      {DType::int16, -32768.4, -32768},
      {DType::int32, 3e9, 2147483647.0},
      {DType::int32, -3e9, -2147483648.0},
      {DType::int32, 123456.5, 123456},
      {DType::int64, 1e19, 9223372036854775807.0},
      {DType::int64, -1e19, -9223372036854775808.0},
      {DType::int64, 9007199254740993.0, 9007199254740992.0},
      {DType::bool_, 0.5, 1},
      {DType::bool_, -0.0, 0},
      {DType::bool_, -3, 1},
      {DType::bool_, k_nan, 0},
  };
  for (const auto& c : cases)
    EXPECT_EQ(gpuemu::round_to(c.d, c.x), c.want) << gpuemu::dtype_name(c.d) << " " << c.x;

  // Storage: what encode_element writes decodes to round_to's value, including int64's clamps.
  std::array<std::byte, 8> buf{};
  for (const auto& c : cases) {
    gpuemu::encode_element(c.d, c.x, buf.data());
    EXPECT_EQ(gpuemu::decode_element(c.d, buf.data()), c.want)
        << gpuemu::dtype_name(c.d) << " stores " << c.x;
  }
  gpuemu::encode_element(DType::int64, 1e19, buf.data());
  std::int64_t v;
  std::memcpy(&v, buf.data(), 8);
  EXPECT_EQ(v, std::numeric_limits<std::int64_t>::max());
  gpuemu::encode_element(DType::int64, k_inf, buf.data());
  std::memcpy(&v, buf.data(), 8);
  EXPECT_EQ(v, std::numeric_limits<std::int64_t>::max());
  gpuemu::encode_element(DType::int64, -1e30, buf.data());
  std::memcpy(&v, buf.data(), 8);
  EXPECT_EQ(v, std::numeric_limits<std::int64_t>::min());
  gpuemu::encode_element(DType::int64, -123456789012345.0, buf.data());
  std::memcpy(&v, buf.data(), 8);
  EXPECT_EQ(v, -123456789012345);
  for (int i = -128; i <= 127; ++i) {
    gpuemu::encode_element(DType::int8, i, buf.data());
    ASSERT_EQ(gpuemu::decode_element(DType::int8, buf.data()), i);
  }
  const auto& i8 = gpuemu::dtype_info(DType::int8);
  EXPECT_FALSE(i8.is_floating);
  EXPECT_EQ(i8.max_finite, 127);
  EXPECT_EQ(i8.lowest, -128);
  EXPECT_EQ(gpuemu::dtype_info(DType::bool_).size, 1u);
}

TEST(Dtype, NamesAndParsing) {
  EXPECT_EQ(gpuemu::all_dtypes().size(), 12u);
  for (DType d : gpuemu::all_dtypes()) {
    EXPECT_EQ(gpuemu::parse_dtype(gpuemu::dtype_name(d)), d) << gpuemu::dtype_name(d);
    EXPECT_EQ(gpuemu::dtype_info(d).dtype, d);
  }
  EXPECT_EQ(gpuemu::dtype_name(DType::bool_), "bool");
  EXPECT_EQ(gpuemu::parse_dtype("bf16"), DType::bfloat16);
  EXPECT_EQ(gpuemu::parse_dtype("fp16"), DType::float16);
  EXPECT_EQ(gpuemu::parse_dtype("half"), DType::float16);
  EXPECT_EQ(gpuemu::parse_dtype("e4m3"), DType::float8_e4m3fn);
  EXPECT_EQ(gpuemu::parse_dtype("fp8_e5m2"), DType::float8_e5m2);
  EXPECT_EQ(gpuemu::parse_dtype("fp32"), DType::float32);
  EXPECT_EQ(gpuemu::parse_dtype("double"), DType::float64);
  EXPECT_EQ(gpuemu::parse_dtype("float128"), std::nullopt);
  EXPECT_EQ(gpuemu::parse_dtype(""), std::nullopt);
  EXPECT_EQ(gpuemu::dtype_size(DType::float8_e5m2), 1u);
  EXPECT_EQ(gpuemu::dtype_size(DType::int64), 8u);
}

}  // namespace

// The bulk conversions are the per-element ones, bit for bit, for every dtype and overflow rule, on
// values of every kind (random bits, specials, overflow thresholds, integers' ranges).
TEST(DtypeBulk, EncodeDecodeAndRoundManyAreTheOneAtATimeFunctions) {
  gpuemu::Rng rng(20261203);
  std::vector<double> x;
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t bits = rng.next_u64();
    x.push_back(i % 2 ? std::bit_cast<double>(bits) : rng.normal() * std::ldexp(1.0, static_cast<int>(rng.integer(-30, 30))));
  }
  for (double v : {0.0, -0.0, 1.0, -1.0, 65504.0, 65520.0, -65520.0, 3.4028234663852886e38, 3.5e38, -3.5e38,
                   448.0, 464.0, 57344.0, 61440.0, 1e-40, 1e-310, 127.5, 128.0, -129.0, 255.5, 256.0, 9.3e18,
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()})
    x.push_back(v);
  for (gpuemu::DType d : gpuemu::all_dtypes()) {
    for (auto ov : {gpuemu::Overflow::to_nan, gpuemu::Overflow::saturate}) {
      const std::size_t es = gpuemu::dtype_size(d);
      std::vector<std::byte> one(x.size() * es), many(x.size() * es);
      for (std::size_t i = 0; i < x.size(); ++i) gpuemu::encode_element(d, x[i], one.data() + i * es, ov);
      gpuemu::encode_elements(d, x.data(), x.size(), many.data(), ov);
      ASSERT_EQ(one, many) << gpuemu::dtype_name(d);
      std::vector<double> back_one(x.size()), back_many(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) back_one[i] = gpuemu::decode_element(d, one.data() + i * es);
      gpuemu::decode_elements(d, one.data(), x.size(), back_many.data());
      ASSERT_EQ(0, std::memcmp(back_one.data(), back_many.data(), x.size() * sizeof(double))) << gpuemu::dtype_name(d);
      std::vector<double> r_one(x.size()), r_many = x;
      for (std::size_t i = 0; i < x.size(); ++i) r_one[i] = gpuemu::round_to(d, x[i], ov);
      gpuemu::round_elements(d, r_many.data(), r_many.size(), ov);
      ASSERT_EQ(0, std::memcmp(r_one.data(), r_many.data(), x.size() * sizeof(double))) << gpuemu::dtype_name(d);
    }
  }
}
