// The fp64 oracle's optional CUDA backend, seen from the engine (evidence/gpu/oracle.md; docs/gpu.md,
// "The fp64 oracle on the GPU").
//
// The CPU computes every reference unless the setting says "cuda": then the GEMMs of the
// GEMM-shaped references (matmul, bmm, linear, the backward GEMMs, convolution through im2col,
// scaled fp8 matmul) and whole attention blocks (flash_attention, decode_attention) large enough
// to pay for the transfers run on the GPU, in fp64, through libgpuemu_oracle_cuda.so
// (engine/cuda/oracle_cuda.cu). The engine never links CUDA: it loads that library at run time,
// so the binaries and the Python module run where there is no GPU and no CUDA runtime.
//
// What goes to the GPU gives the CPU's results up to the order of fp64 sums (agreement 1e-12 of
// the magnitudes the verdict judges by, tests/cpp/gpu_oracle_test.cpp). Inputs holding Inf or
// NaN (the backend checks them on the device and declines), empty shapes and small problems stay
// on the CPU, and so does a call the GPU fails (out of memory, a lost device): the piece is
// computed on the CPU and the first such failure is reported on stderr. The backend is a speed choice; a verdict never depends on it.
#pragma once

#include "gpuemu/engine/oracle_backend.hpp"

#include <cstdint>

namespace gpuemu::ops {
struct AttentionBlock;
}

namespace gpuemu::ops::gpu_oracle {

// The references' hooks: true when the GPU computed the result, false when the caller must
// compute it (the CPU backend, a small problem, non-finite inputs, a GPU failure).
bool dgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
           const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double* C,
           std::int64_t ldc, double beta);
// A GEMM-shaped reference's value C = A·op(B) and condition C_abs = L(|A|)·L(|op(B)|) times each
// output's growth plus growth_weight (scale_by_growth of gemm_ops.cpp), from one copy of the
// operands (A [M,K], B [K,N] or [N,K] when trans_b, all contiguous; C and C_abs [M,N]); L lifts
// magnitudes in (0, lift_below) to lift_below (lift_subnormal_magnitudes).
bool gemm_abs(bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const double* A,
              const double* B, double lift_below, double growth_weight, double* C, double* C_abs);
bool attention(const AttentionBlock& blk);

}  // namespace gpuemu::ops::gpu_oracle
