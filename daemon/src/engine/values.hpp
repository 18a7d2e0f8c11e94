// Value distributions: what a case's inputs hold, op-aware (docs/fuzzing.md).
#pragma once

#include "gpuemu/fuzz.hpp"
#include "gpuemu/rng.hpp"

namespace gpuemu {

struct ValueRequest {
  const OpSchema* schema = nullptr;
  const InputSpec* spec = nullptr;
  DType dtype = DType::float32;
  Distribution distribution = Distribution::adversarial;
  Shape shape;
  std::int64_t bound = 0;   // indices:/targets: upper bound (exclusive), lengths: max (inclusive)
  const Json* attrs = nullptr;
};

// Values in logical row-major order, already exactly representable in the request's dtype.
std::vector<double> generate_values(const ValueRequest& request, Rng& rng);

// The minimizer's simplifications: "zeros", "ones", "small_ints" (integers in [-2, 2]).
std::vector<double> transform_values(const std::string& transform, std::vector<double> values, DType dtype);

}  // namespace gpuemu
