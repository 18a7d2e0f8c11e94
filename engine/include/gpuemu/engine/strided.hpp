// Decoding elements held in someone else's memory (a numpy array, a torch tensor's storage) to
// their exact fp64 values, through any strides: what Tensor::to_f64 does for a Tensor, without
// first copying the bytes into one.
#pragma once

#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/engine/op.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace gpuemu {

// out[i] = the exact value of element i (row-major over `shape`) of the `dtype` elements at
// `first` + Σ index_d·strides[d] elements. Strides are in elements and may be 0 or negative.
void decode_strided(DType dtype, const std::byte* first, std::span<const std::int64_t> shape,
                    std::span<const std::int64_t> strides, double* out);

// The inverse: element i of `in` (row-major over `shape`) encoded into the `dtype` element at
// `first` + Σ index_d·strides[d] (bit for bit encode_element; where strides alias, the last write
// wins, as element by element).
void encode_strided(DType dtype, const double* in, std::span<const std::int64_t> shape,
                    std::span<const std::int64_t> strides, std::byte* first,
                    Overflow overflow = Overflow::to_nan);

// The same into a fresh reference buffer (never zero-filled: every element is written).
RefVec exact_values_of(DType dtype, const std::byte* first, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> strides);

}  // namespace gpuemu
