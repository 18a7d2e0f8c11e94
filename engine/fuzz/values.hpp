// Value distributions: what a case's inputs hold, op-aware (docs/fuzzing.md).
#pragma once

#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/rng.hpp"

namespace gpuemu {

struct ValueRequest {
  const OpSchema* schema = nullptr;
  const InputSpec* spec = nullptr;
  DType dtype = DType::float32;
  Distribution distribution = Distribution::adversarial;
  Shape shape;
  std::int64_t bound = 0;   // indices:/targets: upper bound (exclusive), lengths: max (inclusive)
  const Json* attrs = nullptr;
  // The seed of the case's "pattern:<input>" sub-stream (issue 47): the formulation patterns of the
  // adversarial strategy draw from it, so that a case they leave alone keeps its bytes.
  std::uint64_t pattern_seed = 0;
};

// Values in logical row-major order, already exactly representable in the request's dtype.
std::vector<double> generate_values(const ValueRequest& request, Rng& rng);

// Values drawn jointly, once every input of an adversarial case is materialised (issue 21): the
// operands of a GEMM (matmul, bmm, linear) are made to cancel on some outputs
// (docs/fuzzing.md, "Cancelling dot products"). Leaves the case as it is for other ops, other
// distributions, an expanded operand, and cases the minimizer has simplified (`transforms`).
void draw_jointly(const OpSchema& schema, TestCase& c, Rng& rng);

// Saved forward statistics a backward op takes (domain "saved_rstd": rms_norm's 1/sqrt(mean(x^2) +
// eps) per row of x; "saved_mean" and "saved_ln_rstd": layer_norm's mean and 1/sqrt(var + eps)
// per row of x), computed in fp64 from the case's x once every input is materialised, for
// every distribution; draws nothing.
void derive_saved(const OpSchema& schema, TestCase& c);

// The minimizer's simplifications: "zeros", "ones", "small_ints" (integers in [-2, 2]).
std::vector<double> transform_values(const std::string& transform, std::vector<double> values, DType dtype);

}  // namespace gpuemu
