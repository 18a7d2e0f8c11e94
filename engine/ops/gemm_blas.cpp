#include "ops/gemm_blas.hpp"

#include "core/parallel.hpp"
#include "ops/gpu_oracle.hpp"
#include "ops/op_util.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace gpuemu::ops {

void dgemm_rm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
              const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double* C,
              std::int64_t ldc, double beta) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum: C = beta·C (beta 0 writes zeros, whatever C held)
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = beta == 0.0 ? 0.0 : beta * C[i * ldc + j];
    return;
  }
  if (gpu_oracle::dgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, beta)) return;
  auto bi = [](std::int64_t v) { return static_cast<blasint>(std::max<std::int64_t>(v, 1)); };
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, bi(M), bi(N), bi(K), 1.0, A, bi(lda), B, bi(ldb),
              beta, C, bi(ldc));
}

RefVec abs_copy(const double* x, std::int64_t n) {
  RefVec out = uninit_output(n);  // every element written below
  parallel_for(
      n,
      [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) out[i] = std::fabs(x[i]);
      },
      1 << 18);
  return out;
}

RefVec abs_gemm_condition(const double* A, const double* B, std::int64_t M, std::int64_t N,
                          std::int64_t K, bool trans_b, double factor) {
  const RefVec abs_a = abs_copy(A, M * K), abs_b = abs_copy(B, K * N);
  RefVec c = uninit_output(M * N);  // dgemm_rm with beta = 0 writes all of it
  dgemm_rm(false, trans_b, M, N, K, abs_a.data(), K, abs_b.data(), trans_b ? K : N, c.data(), N);
  if (factor != 1.0)
    parallel_for(
        M * N,
        [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) c[i] *= factor;
        },
        1 << 18);
  return c;
}

double sqrt_len(std::int64_t n) {
  return std::sqrt(static_cast<double>(std::max<std::int64_t>(n, 1)));
}

RefVec gemm_reference_value_only(const double* a, const double* b, std::int64_t M, std::int64_t K,
                                 std::int64_t N) {
  RefVec out = uninit_output(M * N);  // dgemm_rm with beta = 0 writes all of it
  dgemm_rm(false, false, M, N, K, a, K, b, N, out.data(), N);
  return out;
}

Result<std::vector<RefOutput>> matmul_reference_value_only(const RefContext& ctx) {
  const RefArg& a = ctx.input("a");
  const RefArg& b = ctx.input("b");
  if (a.shape.size() != 2 || b.shape.size() != 2 || a.shape[1] != b.shape[0])
    return make_error(ErrorCode::shape_mismatch, "matmul needs a[M,K] and b[K,N], got " +
                                                     shape_to_string(a.shape) + " and " +
                                                     shape_to_string(b.shape));
  const std::int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
  return single_output(ctx.output_dtype(), {M, N},
                       gemm_reference_value_only(a.data.data(), b.data.data(), M, K, N));
}

double subnormal_lift(DType dtype) {
  return dtype == DType::float16 || dtype == DType::bfloat16 ? dtype_info(dtype).min_normal : 0.0;
}

void lift_subnormal_magnitudes(RefVec& abs_values, DType dtype) {
  const double min_normal = subnormal_lift(dtype);
  if (min_normal == 0.0) return;
  parallel_for(static_cast<std::int64_t>(abs_values.size()), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      if (abs_values[i] > 0.0 && abs_values[i] < min_normal) abs_values[i] = min_normal;
  }, 1 << 18);
}

}  // namespace gpuemu::ops
