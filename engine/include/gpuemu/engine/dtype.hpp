// Element types and exact conversions between double and every low-precision format.
//
// Conversions from double round to nearest, ties to even, directly from the double (no detour
// through float32, which would round twice). Subnormals, signed zeros, NaN and infinities follow
// each format:
//  - float16 (IEEE binary16), bfloat16, float8_e5m2: overflow rounds to +-Inf.
//  - float8_e4m3fn (OCP FP8, "fn" = finite + NaN): there is no Inf. By default (Overflow::to_nan)
//    a value that rounds past the largest finite (448) becomes NaN, and +-Inf becomes NaN: this is
//    what PyTorch's `tensor.to(torch.float8_e4m3fn)` and the OCP spec's non-saturating conversion
//    do, so the bits a kernel receives match what a framework cast produces. Overflow::saturate
//    clamps to +-448 (Inf included), which is what quantisation kernels (fp8_quantize) do.
// NaN is encoded as the format's canonical quiet NaN with the input's sign.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpuemu {

enum class DType : std::uint8_t {
  float64,
  float32,
  float16,
  bfloat16,
  float8_e4m3fn,
  float8_e5m2,
  int8,
  int16,
  int32,
  int64,
  uint8,
  bool_,
};

enum class Overflow { to_nan, saturate };

// Static facts about a dtype.
struct DTypeInfo {
  DType dtype;
  std::string_view name;   // "bfloat16"; bool_ is "bool"
  std::size_t size;        // bytes per element
  bool is_floating;
  int mantissa_bits;       // explicit fraction bits (0 for integers)
  double unit_roundoff;    // u = 2^-(mantissa_bits+1); 0 for integers
  double max_finite;       // largest finite value (integers: max value)
  double lowest;           // most negative value
  double min_normal;       // smallest positive normal (integers: 1)
  double min_subnormal;    // smallest positive subnormal (integers: 1)
};

const DTypeInfo& dtype_info(DType dtype);
std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);  // accepts "bf16", "fp16", "half", ...
const std::vector<DType>& all_dtypes();
inline std::size_t dtype_size(DType d) { return dtype_info(d).size; }
inline bool is_floating(DType d) { return dtype_info(d).is_floating; }

// Bit-level conversions.
std::uint16_t f64_to_f16_bits(double x);
std::uint16_t f64_to_bf16_bits(double x);
std::uint8_t f64_to_e4m3fn_bits(double x, Overflow overflow = Overflow::to_nan);
std::uint8_t f64_to_e5m2_bits(double x, Overflow overflow = Overflow::to_nan);
double f16_bits_to_f64(std::uint16_t bits);
double bf16_bits_to_f64(std::uint16_t bits);
double e4m3fn_bits_to_f64(std::uint8_t bits);
double e5m2_bits_to_f64(std::uint8_t bits);

// x rounded to `dtype` and returned as a double (exactly the value the element will hold).
// Integer dtypes round half to even and clamp to their range; NaN becomes 0 for integers.
double round_to(DType dtype, double x, Overflow overflow = Overflow::to_nan);

// Element storage: encode `x` into `dst` (dtype_size bytes, little-endian), decode back.
void encode_element(DType dtype, double x, std::byte* dst, Overflow overflow = Overflow::to_nan);
double decode_element(DType dtype, const std::byte* src);
// n elements at once, packed: the same bits as n calls of the functions above, with the choice of
// format made once rather than per element (what tensors of millions of elements go through).
void encode_elements(DType dtype, const double* x, std::size_t n, std::byte* dst,
                     Overflow overflow = Overflow::to_nan);
void decode_elements(DType dtype, const std::byte* src, std::size_t n, double* out);
// round_to over n values in place.
void round_elements(DType dtype, double* x, std::size_t n, Overflow overflow = Overflow::to_nan);

}  // namespace gpuemu
