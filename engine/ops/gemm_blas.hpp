// fp64 GEMM through OpenBLAS for the references of the GEMM-shaped ops (matmul, bmm, linear,
// attention, convolution through im2col, scaled fp8 matmul), and the dot-product condition term.
//
// The condition term of a dot product of length K is c_acc = (|a|·|b|)·sqrt(K): what a correct
// kernel summing the K products in fp32 can be off by, in units of u_fp32 (docs/error-model.md).
// Computing |a|·|b| exactly costs a second dgemm on absolute values. We keep it exact (a cheaper
// bound such as ‖a_i‖₂‖b_j‖₂ is loose exactly where it matters: outliers that do not meet in the
// same k), and offer gemm_reference_value_only() for callers that want only the fp64 value at raw
// dgemm speed (the matmul benchmark compares that path with a bare cblas_dgemm).
#pragma once

#include "gpuemu/engine/op.hpp"

#include <cstdint>
#include <vector>

namespace gpuemu::ops {

// Row-major C[M,N] = op(A)·op(B) + beta·C in fp64. op(A) is [M,K]: A is stored [M,K] (lda >= K)
// or, when trans_a, [K,M] (lda >= M); likewise op(B) is [K,N] from B stored [K,N] or [N,K].
// Any of M, N, K may be 0. IEEE semantics throughout (NaN and Inf propagate; 0·Inf is NaN).
void dgemm_rm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
              const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double* C,
              std::int64_t ldc, double beta = 0.0);

// The buffers below come from ops::uninit_output (op_util.hpp): huge pages for a large one, and
// no zero-fill, since each is written in full (dgemm_rm with beta = 0 writes all of C, whatever C
// held, as BLAS specifies). A fresh 32 MiB buffer otherwise costs ~8000 page faults (~30 ms on our
// 2-core VMs, 11% of a 2048^3 dgemm; ~7 ms with huge pages), and a zero-fill one more pass over it
// on one thread.

// |x| element-wise, as a new vector.
RefVec abs_copy(const double* x, std::int64_t n);
inline RefVec abs_copy(const RefVec& x) {
  return abs_copy(x.data(), static_cast<std::int64_t>(x.size()));
}

// c[M,N] = (|A|·|B|)·factor for A [M,K] and B [K,N] (or [N,K] when trans_b), both contiguous.
RefVec abs_gemm_condition(const double* A, const double* B, std::int64_t M, std::int64_t N,
                          std::int64_t K, bool trans_b, double factor);

// sqrt(max(n, 1)): the length factor of an fp32 accumulation of n terms.
double sqrt_len(std::int64_t n);

// The weight of |a|·|b| in c_acc (counted in units of the fp32 roundoff) that a precision policy's
// operand rounding adds (RefContext::operand_roundoff, gpuemu/engine/precision.hpp): each product of two
// operands off by u relative is off by 2u + u² of its magnitude, whatever K, so the GEMM's result
// by at most (2u + u²)·(|a|·|b|). 0 under IEEE.
inline double policy_weight(const RefContext& ctx) {
  const double u = ctx.operand_roundoff;
  return (2.0 * u + u * u) * 0x1.0p24;
}

// A policy's absolute operand error (RefContext::operand_floor: eta, the format's subnormal
// spacing): an operand x below fp32's smallest normal converts with an error s(x) = min(|x|, eta)
// at most (0 is on the format's grid, so neither rounding nor truncation moves it further), where
// the relative u bounds a normal operand's. 0 for a normal operand, a zero, and under IEEE.
inline double subnormal_error(const RefContext& ctx, double x) {
  const double m = std::fabs(x);
  return (m > 0.0 && m < 0x1.0p-126) ? (m < ctx.operand_floor ? m : ctx.operand_floor) : 0.0;
}

// What that adds to one product a*b's error beyond the relative part (policy_weight), in c_acc's
// fp32 units: with |da| <= u|a| + s(a) and |db| <= u|b| + s(b), |da b + a db + da db| exceeds the
// relative part by at most (1 + u) s(a)|b| + (1 + u)|a| s(b) + s(a) s(b) <= (2 + u) s(a)|b| +
// (1 + u)|a| s(b) (s(b) <= |b|). Called with s(a) for the first term, s(b) for the second.
// Tensor cores align a dot product's products on the exponent the operands' exponent fields give,
// a subnormal counted at the smallest normal's (H200, bf16 and fp16, cuBLAS's nvjet and CUTLASS
// kernels: evidence/gpu/tf32.md, "Tensor-core subnormal alignment"): the other products are cut as
// next to a product that large. The accumulation term counts such an operand at that magnitude:
// |x| in [0, min normal of `dtype`) but 0 becomes the min normal, in an |operand| copy, for fp16
// and bf16 (the dtypes tensor cores take; fp32 runs on FFMA or under a declared policy).
void lift_subnormal_magnitudes(RefVec& abs_values, DType dtype);
// The magnitude lift_subnormal_magnitudes lifts to: the smallest normal of fp16 and bf16, else 0.
double subnormal_lift(DType dtype);

inline double floor_weight_a(const RefContext& ctx) { return (2.0 + ctx.operand_roundoff) * 0x1.0p24; }
inline double floor_weight_b(const RefContext& ctx) { return (1.0 + ctx.operand_roundoff) * 0x1.0p24; }

// The fp64 value of a[M,K]·b[K,N] (row-major, contiguous) and nothing else: one dgemm into the
// returned buffer. This is the path the matmul benchmark holds against a bare cblas_dgemm.
RefVec gemm_reference_value_only(const double* a, const double* b, std::int64_t M, std::int64_t K,
                                 std::int64_t N);

// matmul's reference without condition terms (c_acc and c_in empty): the value path alone.
Result<std::vector<RefOutput>> matmul_reference_value_only(const RefContext& ctx);

}  // namespace gpuemu::ops
