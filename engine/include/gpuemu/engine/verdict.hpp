// The verdict: a kernel's outputs against the fp64 reference, under the error model of
// docs/error-model.md. Per element,
//   err = |out - ref| / (u_out*|ref| + u_acc*c_acc + u_in*c_in + tiny_out)
// and the case passes when max err <= the calibrated envelope of (op, dtype).
#pragma once

#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/op.hpp"

#include <string>
#include <vector>

namespace gpuemu {

struct OutputVerdict {
  std::string name;
  Shape shape;                         // the reference's shape (the output judged against it)
  bool passed = true;
  double max_error = 0.0;              // max normalised error over finite, comparable elements
  std::int64_t worst_index = -1;       // row-major index of the worst element
  std::vector<std::int64_t> worst_coords;
  double worst_out = 0.0, worst_ref = 0.0;
  std::int64_t failing = 0;            // elements over the envelope (or non-finite mismatches)
  std::int64_t nonfinite_mismatch = 0; // NaN/Inf where the reference is finite, or the reverse
  std::int64_t nan_where_finite = 0;   // of those, NaN where the reference is finite (a class of
                                       // its own: 0 x Inf inside a kernel, evidence/gpu/cudnn.md)
  std::int64_t indeterminate = 0;      // elements whose intermediates overflow legitimately
  std::int64_t alternative = 0;        // non-finite results another correct formulation gives
  std::int64_t unresolved = 0;         // elements the reference cannot resolve (an op from PyTorch
                                       // code, docs/torch-ops.md: a decision within its own error)
  std::string message;
  RefVec errors;                       // per-element normalised error, row-major (diagnosis and
                                       // the error map, gpuemu/engine/error_map.hpp); inf: mismatch
};

struct Verdict {
  bool passed = true;
  // Passed where it could be judged, but some elements the reference cannot resolve: the case
  // counts neither as a pass nor as a failure (FuzzReport::inconclusive).
  bool inconclusive = false;
  double max_error = 0.0;
  double envelope = 0.0;
  std::string message;                 // one line
  std::vector<OutputVerdict> outputs;
  Json to_json() const;                // without the per-element errors
};

// Unit roundoff of the accumulator the error model assumes (fp32).
constexpr double k_u_acc = 0x1.0p-24;

// How far past the smallest normal a reference may lie and a correct result still reach the
// subnormal range, in multiples of its bound (envelopes are 2 to 3 such bounds).
constexpr double k_floor_reach = 4.0;

// Normalised error of one element (finite out and ref). `exact`: the op's bound is zero
// (RefOutput::exact), so only the floor near zero divides the difference.
double normalised_error(double out, double ref, double c_acc, double c_in, DType out_dtype, DType in_dtype,
                        bool exact = false);

// The finite value an infinity of `dtype` stands for when the other side of a comparison is
// finite: +(max finite + one ulp at max), the first power of two past the range (fp16 65536,
// bf16 and fp32 2^128). NaN for dtypes without an infinity (float8_e4m3fn, integers) and for
// float64, whose stand-in is not a finite double.
double inf_stand_in(DType dtype);

// Each reference output's values rounded to its dtype (what every element is compared with):
// computed once where several candidates are judged against one reference.
std::vector<std::vector<double>> rounded_reference(const std::vector<RefOutput>& reference);

// Judges `outputs` (what the kernel returned, any layout) against the reference. `rounded`, when
// given, is rounded_reference(reference).
Verdict judge(const OpSchema& schema, const RefContext& ctx, const std::vector<RefOutput>& reference,
              const std::vector<Tensor>& outputs, double envelope,
              const std::vector<std::vector<double>>* rounded = nullptr);

}  // namespace gpuemu
