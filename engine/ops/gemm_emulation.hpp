// GEMM kernels emulated on the CPU the way GPU kernels compute them: inputs hold exactly the values
// the kernel received (case dtype), products and sums in fp32 over K tiles, optionally split-K with
// fp32 partials summed at the end. The same engine runs the known-buggy variants (accumulator
// overwritten per tile, accumulator kept in a 16-bit dtype, tail K tile dropped). Used by the
// controls of matmul, bmm, linear, conv1d/conv2d (implicit GEMM) and scaled_fp8_matmul.
#pragma once

#include "gpuemu/engine/dtype.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

namespace gpuemu::ops {

// x rounded to `dtype` (float16, bfloat16, fp8, ...; float32 and float64 leave it as is).
float round_lowp(DType dtype, float x);

// y[j] += a * x[j] for j in [0, n): each element its own fp32 multiply then add (no FMA, no
// reassociation), so the result is the scalar loop's bit for bit; written with vector extensions
// because -O2 does not vectorise loops of unknown length.
inline void axpy_f32(float a, const float* x, float* y, std::int64_t n) {
  typedef float v8f __attribute__((vector_size(32)));
  const v8f va = {a, a, a, a, a, a, a, a};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v8f vx, vy;
    std::memcpy(&vx, x + j, sizeof vx);
    std::memcpy(&vy, y + j, sizeof vy);
    vy += va * vx;
    std::memcpy(y + j, &vy, sizeof vy);
  }
  for (; j < n; ++j) y[j] += a * x[j];
}

// y[j] += x[j] for j in [0, n).
inline void add_f32(const float* x, float* y, std::int64_t n) {
  typedef float v8f __attribute__((vector_size(32)));
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v8f vx, vy;
    std::memcpy(&vx, x + j, sizeof vx);
    std::memcpy(&vy, y + j, sizeof vy);
    vy += vx;
    std::memcpy(y + j, &vy, sizeof vy);
  }
  for (; j < n; ++j) y[j] += x[j];
}

// Doubles (exactly representable in fp32: the case dtype's values) as floats.
std::vector<float> to_f32(const double* v, std::int64_t n);
inline std::vector<float> to_f32(const std::vector<double>& v) {
  return to_f32(v.data(), static_cast<std::int64_t>(v.size()));
}
// A row-major [rows, cols] block of doubles, transposed to [cols, rows] floats.
std::vector<float> transpose_to_f32(const double* v, std::int64_t rows, std::int64_t cols);
// Floats back to doubles, each rounded to `dtype` (a kernel's final store).
std::vector<double> store_as(DType dtype, const std::vector<float>& v);

enum class GemmBug {
  none,
  acc_overwrite,      // `acc = tl.dot(a, b)` instead of `acc += ...`: only the last K tile survives
  low_precision_acc,  // the accumulator is a 16-bit variable, rounded after every product
  dropped_tail_k,     // `for k in range(K // BLOCK_K)`: the partial last K tile is never loaded
};

struct GemmEmulation {
  std::int64_t block_k = 32;  // K tile; <= 0 means one tile over all of K (a plain fp32 chain)
  std::int64_t split_k = 1;   // K split into this many chunks, fp32 partials summed at the end
  GemmBug bug = GemmBug::none;
  DType low_dtype = DType::bfloat16;  // the accumulator's dtype under GemmBug::low_precision_acc
};

// C[M,N] = A[M,K]·B[K,N] (row-major floats) as the configured kernel computes it: each K tile's
// products are summed in fp32 starting from zero (an MMA's tile dot), then added to the fp32
// accumulator. Returns the fp32 accumulator (not yet rounded to an output dtype).
std::vector<float> emulate_gemm(const float* A, const float* B, std::int64_t M, std::int64_t K,
                                std::int64_t N, const GemmEmulation& cfg);

}  // namespace gpuemu::ops
