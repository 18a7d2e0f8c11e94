#include "gpuemu/engine/dtype.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace gpuemu {
namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

// A binary floating-point format with an implicit leading bit.
struct FloatFormat {
  int exp_bits;
  int man_bits;
  int bias;
  bool has_inf;        // IEEE-style: all-ones exponent is Inf/NaN
  std::uint32_t nan;   // canonical quiet NaN, positive
};

constexpr FloatFormat k_f16{5, 10, 15, true, 0x7E00};
constexpr FloatFormat k_bf16{8, 7, 127, true, 0x7FC0};
constexpr FloatFormat k_e5m2{5, 2, 15, true, 0x7E};
constexpr FloatFormat k_e4m3fn{4, 3, 7, false, 0x7F};

constexpr int min_normal_exp(const FloatFormat& f) { return 1 - f.bias; }

// Largest finite value: e4m3fn uses the all-ones exponent for numbers except mantissa all-ones.
double max_finite(const FloatFormat& f) {
  if (f.has_inf) {
    int emax = (1 << f.exp_bits) - 2 - f.bias;
    return std::ldexp(2.0 - std::ldexp(1.0, -f.man_bits), emax);
  }
  int emax = (1 << f.exp_bits) - 1 - f.bias;
  return std::ldexp(2.0 - std::ldexp(1.0, 1 - f.man_bits), emax);
}

// v / 2^s rounded to the nearest integer, ties to even (1 <= s <= 63).
constexpr std::uint64_t shift_rne(std::uint64_t v, int s) {
  const std::uint64_t q = v >> s;
  const std::uint64_t rem = v & ((std::uint64_t{1} << s) - 1);
  const std::uint64_t half = std::uint64_t{1} << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

constexpr std::uint64_t k_f64_abs = 0x7FFF'FFFF'FFFF'FFFFull;
constexpr std::uint64_t k_f64_inf = 0x7FF0'0000'0000'0000ull;
constexpr std::uint64_t k_f64_qnan = 0x7FF8'0000'0000'0000ull;
constexpr std::uint64_t k_f64_sign = 0x8000'0000'0000'0000ull;

// Encodes x in the format, rounding to nearest with ties to even, on the double's bits: the
// format's pattern is the double's exponent and fraction re-biased and shifted right by the
// fraction bits it lacks, so a rounding carry moves into the exponent as it should (the largest
// subnormal rounds up to the smallest normal, the largest finite value past it to the overflow
// check). Exact for every double: tests/cpp/dtype_test.cpp checks it against a brute-force oracle.
std::uint32_t encode_float(const FloatFormat& f, double x, Overflow overflow) {
  const auto b = std::bit_cast<std::uint64_t>(x);
  const std::uint32_t sign = (b & k_f64_sign) ? (1u << (f.exp_bits + f.man_bits)) : 0u;
  const std::uint64_t a = b & k_f64_abs;
  if (a > k_f64_inf) return sign | f.nan;
  const std::uint32_t max_bits =
      f.has_inf ? ((((1u << f.exp_bits) - 2) << f.man_bits) | ((1u << f.man_bits) - 1))
                : ((((1u << f.exp_bits) - 1) << f.man_bits) | ((1u << f.man_bits) - 2));
  const auto overflowed = [&] {
    if (overflow == Overflow::saturate) return sign | max_bits;
    return sign | (f.has_inf ? ((1u << f.exp_bits) - 1) << f.man_bits : f.nan);
  };
  if (a == k_f64_inf) return overflowed();
  const int shift = 52 - f.man_bits;
  const int biased = static_cast<int>(a >> 52);  // 0 for double subnormals and zero
  const int e = biased == 0 ? -1022 : biased - 1023;
  std::uint64_t out;
  if (e >= min_normal_exp(f)) {
    out = shift_rne(a - (static_cast<std::uint64_t>(1023 - f.bias) << 52), shift);
  } else {  // a subnormal of the format, or zero: the significand over its quantum
    const std::uint64_t m = (a & ((std::uint64_t{1} << 52) - 1)) | (biased == 0 ? 0 : std::uint64_t{1} << 52);
    const int s = shift + (min_normal_exp(f) - e);
    out = s >= 64 ? 0 : shift_rne(m, s);
  }
  if (out > max_bits) return overflowed();
  return sign | static_cast<std::uint32_t>(out);
}

double decode_float(const FloatFormat& f, std::uint32_t bits) {
  const std::uint32_t man_mask = (1u << f.man_bits) - 1;
  const std::uint32_t exp_mask = (1u << f.exp_bits) - 1;
  const std::uint64_t sign = ((bits >> (f.exp_bits + f.man_bits)) & 1u) ? k_f64_sign : 0;
  const std::uint32_t field = (bits >> f.man_bits) & exp_mask;
  const std::uint32_t mant = bits & man_mask;
  if (field == exp_mask && f.has_inf) return std::bit_cast<double>(sign | (mant == 0 ? k_f64_inf : k_f64_qnan));
  if (field == exp_mask && mant == man_mask && !f.has_inf) return std::bit_cast<double>(sign | k_f64_qnan);
  if (field == 0) {  // subnormal: mant quanta of 2^(emin - man_bits), a normal double
    const double quantum =
        std::bit_cast<double>(static_cast<std::uint64_t>(min_normal_exp(f) - f.man_bits + 1023) << 52);
    const double v = static_cast<double>(mant) * quantum;
    return sign ? -v : v;
  }
  return std::bit_cast<double>(sign |
                               (static_cast<std::uint64_t>(static_cast<int>(field) - f.bias + 1023) << 52) |
                               (static_cast<std::uint64_t>(mant) << (52 - f.man_bits)));
}

DTypeInfo float_info(DType d, std::string_view name, std::size_t size, const FloatFormat& f) {
  double mx = max_finite(f);
  return DTypeInfo{d,
                   name,
                   size,
                   true,
                   f.man_bits,
                   std::ldexp(1.0, -(f.man_bits + 1)),
                   mx,
                   -mx,
                   std::ldexp(1.0, min_normal_exp(f)),
                   std::ldexp(1.0, min_normal_exp(f) - f.man_bits)};
}

DTypeInfo int_info(DType d, std::string_view name, std::size_t size, double lo, double hi) {
  return DTypeInfo{d, name, size, false, 0, 0.0, hi, lo, 1.0, 1.0};
}

const std::array<DTypeInfo, 12>& info_table() {
  static const std::array<DTypeInfo, 12> table = [] {
    using L = std::numeric_limits<double>;
    using F = std::numeric_limits<float>;
    return std::array<DTypeInfo, 12>{
        DTypeInfo{DType::float64, "float64", 8, true, 52, std::ldexp(1.0, -53), L::max(),
                  L::lowest(), L::min(), L::denorm_min()},
        DTypeInfo{DType::float32, "float32", 4, true, 23, std::ldexp(1.0, -24), F::max(),
                  F::lowest(), F::min(), F::denorm_min()},
        float_info(DType::float16, "float16", 2, k_f16),
        float_info(DType::bfloat16, "bfloat16", 2, k_bf16),
        float_info(DType::float8_e4m3fn, "float8_e4m3fn", 1, k_e4m3fn),
        float_info(DType::float8_e5m2, "float8_e5m2", 1, k_e5m2),
        int_info(DType::int8, "int8", 1, -128.0, 127.0),
        int_info(DType::int16, "int16", 2, -32768.0, 32767.0),
        int_info(DType::int32, "int32", 4, -2147483648.0, 2147483647.0),
        int_info(DType::int64, "int64", 8, -9223372036854775808.0, 9223372036854775807.0),
        int_info(DType::uint8, "uint8", 1, 0.0, 255.0),
        int_info(DType::bool_, "bool", 1, 0.0, 1.0),
    };
  }();
  return table;
}

double round_integer(DType d, double x) {
  if (std::isnan(x)) return 0.0;
  if (d == DType::bool_) return x != 0.0 ? 1.0 : 0.0;
  const auto& info = dtype_info(d);
  double r = std::nearbyint(x);  // default rounding mode: ties to even
  if (d == DType::int64) {
    // 2^63 is not representable in int64; clamp below it.
    if (r >= 9223372036854775808.0) return 9223372036854775807.0;  // rounds to 2^63 as double
  }
  return std::clamp(r, info.lowest, info.max_finite);
}

template <typename T>
void store(std::byte* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}
template <typename T>
T load(const std::byte* src) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  return v;
}

}  // namespace

std::uint16_t f64_to_f16_bits(double x) {
  return static_cast<std::uint16_t>(encode_float(k_f16, x, Overflow::to_nan));
}
std::uint16_t f64_to_bf16_bits(double x) {
  return static_cast<std::uint16_t>(encode_float(k_bf16, x, Overflow::to_nan));
}
std::uint8_t f64_to_e4m3fn_bits(double x, Overflow overflow) {
  return static_cast<std::uint8_t>(encode_float(k_e4m3fn, x, overflow));
}
std::uint8_t f64_to_e5m2_bits(double x, Overflow overflow) {
  return static_cast<std::uint8_t>(encode_float(k_e5m2, x, overflow));
}
double f16_bits_to_f64(std::uint16_t bits) { return decode_float(k_f16, bits); }
double bf16_bits_to_f64(std::uint16_t bits) { return decode_float(k_bf16, bits); }
double e4m3fn_bits_to_f64(std::uint8_t bits) { return decode_float(k_e4m3fn, bits); }
double e5m2_bits_to_f64(std::uint8_t bits) { return decode_float(k_e5m2, bits); }

const DTypeInfo& dtype_info(DType dtype) {
  return info_table()[static_cast<std::size_t>(dtype)];
}

std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }

const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> all = [] {
    std::vector<DType> v;
    for (const auto& i : info_table()) v.push_back(i.dtype);
    return v;
  }();
  return all;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : info_table())
    if (i.name == name) return i.dtype;
  struct Alias {
    std::string_view alias;
    DType dtype;
  };
  static constexpr Alias k_aliases[] = {
      {"fp64", DType::float64}, {"double", DType::float64}, {"fp32", DType::float32},
      {"float", DType::float32}, {"fp16", DType::float16}, {"half", DType::float16},
      {"bf16", DType::bfloat16}, {"e4m3", DType::float8_e4m3fn}, {"fp8_e4m3", DType::float8_e4m3fn},
      {"float8_e4m3", DType::float8_e4m3fn}, {"e5m2", DType::float8_e5m2},
      {"fp8_e5m2", DType::float8_e5m2}, {"long", DType::int64}, {"int", DType::int32},
  };
  for (const auto& a : k_aliases)
    if (a.alias == name) return a.dtype;
  return std::nullopt;
}

double round_to(DType dtype, double x, Overflow overflow) {
  switch (dtype) {
    case DType::float64: return x;
    case DType::float32: {
      if (overflow == Overflow::saturate && !std::isnan(x))
        return static_cast<double>(static_cast<float>(
            std::clamp(x, static_cast<double>(std::numeric_limits<float>::lowest()),
                       static_cast<double>(std::numeric_limits<float>::max()))));
      return static_cast<double>(static_cast<float>(x));
    }
    case DType::float16: return decode_float(k_f16, encode_float(k_f16, x, overflow));
    case DType::bfloat16: return decode_float(k_bf16, encode_float(k_bf16, x, overflow));
    case DType::float8_e4m3fn: return decode_float(k_e4m3fn, encode_float(k_e4m3fn, x, overflow));
    case DType::float8_e5m2: return decode_float(k_e5m2, encode_float(k_e5m2, x, overflow));
    default: return round_integer(dtype, x);
  }
}

void encode_element(DType dtype, double x, std::byte* dst, Overflow overflow) {
  switch (dtype) {
    case DType::float64: store(dst, x); return;
    case DType::float32: store(dst, static_cast<float>(round_to(DType::float32, x, overflow))); return;
    case DType::float16: store(dst, static_cast<std::uint16_t>(encode_float(k_f16, x, overflow))); return;
    case DType::bfloat16: store(dst, static_cast<std::uint16_t>(encode_float(k_bf16, x, overflow))); return;
    case DType::float8_e4m3fn: store(dst, static_cast<std::uint8_t>(encode_float(k_e4m3fn, x, overflow))); return;
    case DType::float8_e5m2: store(dst, static_cast<std::uint8_t>(encode_float(k_e5m2, x, overflow))); return;
    case DType::int8: store(dst, static_cast<std::int8_t>(round_integer(dtype, x))); return;
    case DType::int16: store(dst, static_cast<std::int16_t>(round_integer(dtype, x))); return;
    case DType::int32: store(dst, static_cast<std::int32_t>(round_integer(dtype, x))); return;
    case DType::int64: {
      // round_integer clamps to 2^63 (INT64_MAX is not a double); casting 2^63 would overflow.
      const double r = round_integer(dtype, x);
      store(dst, r >= 9223372036854775808.0 ? std::numeric_limits<std::int64_t>::max()
                                            : static_cast<std::int64_t>(r));
      return;
    }
    case DType::uint8: store(dst, static_cast<std::uint8_t>(round_integer(dtype, x))); return;
    case DType::bool_: store(dst, static_cast<std::uint8_t>(round_integer(dtype, x))); return;
  }
}

double decode_element(DType dtype, const std::byte* src) {
  switch (dtype) {
    case DType::float64: return load<double>(src);
    case DType::float32: return static_cast<double>(load<float>(src));
    case DType::float16: return decode_float(k_f16, load<std::uint16_t>(src));
    case DType::bfloat16: return decode_float(k_bf16, load<std::uint16_t>(src));
    case DType::float8_e4m3fn: return decode_float(k_e4m3fn, load<std::uint8_t>(src));
    case DType::float8_e5m2: return decode_float(k_e5m2, load<std::uint8_t>(src));
    case DType::int8: return static_cast<double>(load<std::int8_t>(src));
    case DType::int16: return static_cast<double>(load<std::int16_t>(src));
    case DType::int32: return static_cast<double>(load<std::int32_t>(src));
    case DType::int64: return static_cast<double>(load<std::int64_t>(src));
    case DType::uint8: return static_cast<double>(load<std::uint8_t>(src));
    case DType::bool_: return load<std::uint8_t>(src) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

namespace {

template <class Bits>
void encode_format(const FloatFormat& f, const double* x, std::size_t n, std::byte* dst, Overflow overflow) {
  for (std::size_t i = 0; i < n; ++i) store(dst + i * sizeof(Bits), static_cast<Bits>(encode_float(f, x[i], overflow)));
}

template <class Bits>
void decode_format(const FloatFormat& f, const std::byte* src, std::size_t n, double* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = decode_float(f, load<Bits>(src + i * sizeof(Bits)));
}

}  // namespace

void encode_elements(DType dtype, const double* x, std::size_t n, std::byte* dst, Overflow overflow) {
  switch (dtype) {
    case DType::float64: std::memcpy(dst, x, n * sizeof(double)); return;
    case DType::float32:
      if (overflow != Overflow::saturate) {
        for (std::size_t i = 0; i < n; ++i) store(dst + i * 4, static_cast<float>(x[i]));
        return;
      }
      break;
    case DType::float16: encode_format<std::uint16_t>(k_f16, x, n, dst, overflow); return;
    case DType::bfloat16: encode_format<std::uint16_t>(k_bf16, x, n, dst, overflow); return;
    default: break;
  }
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i < n; ++i) encode_element(dtype, x[i], dst + i * es, overflow);
}

void decode_elements(DType dtype, const std::byte* src, std::size_t n, double* out) {
  switch (dtype) {
    case DType::float64: std::memcpy(out, src, n * sizeof(double)); return;
    case DType::float32:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(load<float>(src + i * 4));
      return;
    case DType::float16: decode_format<std::uint16_t>(k_f16, src, n, out); return;
    case DType::bfloat16: decode_format<std::uint16_t>(k_bf16, src, n, out); return;
    default: break;
  }
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i < n; ++i) out[i] = decode_element(dtype, src + i * es);
}

void round_elements(DType dtype, double* x, std::size_t n, Overflow overflow) {
  switch (dtype) {
    case DType::float64: return;
    case DType::float32:
      if (overflow != Overflow::saturate) {
        for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<double>(static_cast<float>(x[i]));
        return;
      }
      break;
    case DType::float16:
      for (std::size_t i = 0; i < n; ++i) x[i] = decode_float(k_f16, encode_float(k_f16, x[i], overflow));
      return;
    case DType::bfloat16:
      for (std::size_t i = 0; i < n; ++i) x[i] = decode_float(k_bf16, encode_float(k_bf16, x[i], overflow));
      return;
    default: break;
  }
  for (std::size_t i = 0; i < n; ++i) x[i] = round_to(dtype, x[i], overflow);
}

}  // namespace gpuemu
