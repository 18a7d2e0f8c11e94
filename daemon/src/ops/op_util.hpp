// Small helpers shared by the built-in op implementations.
#pragma once

#include "gpuemu/op.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace gpuemu::ops {

// A tensor seen as [outer, len, inner] around one reduced dim.
struct ReduceGeom {
  std::int64_t outer = 1, len = 1, inner = 1;
  std::int64_t index(std::int64_t o, std::int64_t k, std::int64_t i) const {
    return (o * len + k) * inner + i;
  }
};

// The geometry of reducing `shape` over `dim` (negative counts from the end). Fails on a bad dim.
Result<ReduceGeom> reduce_geom(const Shape& shape, std::int64_t dim);
// `shape` without `dim` (or with it set to 1 when keepdim).
Shape reduced_shape(const Shape& shape, std::int64_t dim, bool keepdim);

// Round every value to `dtype` (controls round their outputs once, like a kernel's final store).
std::vector<double> round_all(DType dtype, std::vector<double> v);
inline float f32(double x) { return static_cast<float>(x); }

// One output named "out" with the given shape, dtype and values; condition vectors optional.
std::vector<RefOutput> single_output(DType dtype, Shape shape, std::vector<double> value,
                                     std::vector<double> c_acc = {}, std::vector<double> c_in = {});

inline bool finite(double x) { return std::isfinite(x); }

}  // namespace gpuemu::ops
