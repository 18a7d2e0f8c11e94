#include "ops/gemm_emulation.hpp"

#include "core/parallel.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace gpuemu::ops {

float round_lowp(DType dtype, float x) {
  switch (dtype) {
    case DType::float32:
    case DType::float64:
      return x;
    case DType::bfloat16: {  // round to nearest even on the bits; NaN stays NaN, overflow -> Inf
      if (std::isnan(x)) return x;
      std::uint32_t u = std::bit_cast<std::uint32_t>(x);
      u += 0x7FFFu + ((u >> 16) & 1u);
      return std::bit_cast<float>(u & 0xFFFF0000u);
    }
#ifdef __FLT16_MAX__
    case DType::float16:
      return static_cast<float>(static_cast<_Float16>(x));  // IEEE conversion, ties to even
#endif
    default:
      return static_cast<float>(round_to(dtype, static_cast<double>(x)));
  }
}

std::vector<float> to_f32(const double* v, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

std::vector<float> transpose_to_f32(const double* v, std::int64_t rows, std::int64_t cols) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = static_cast<float>(v[r * cols + c]);
  return out;
}

std::vector<double> store_as(DType dtype, const std::vector<float>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = round_to(dtype, static_cast<double>(v[i]));
  return out;
}

namespace {

// One output row: acc[0..N) for row a[0..K).
void gemm_row(const float* a, const float* B, std::int64_t K, std::int64_t N,
              const GemmEmulation& cfg, float* acc, float* part, float* tile) {
  std::fill(acc, acc + N, 0.0f);
  if (cfg.bug == GemmBug::low_precision_acc) {
    for (std::int64_t k = 0; k < K; ++k) {
      const float ak = a[k];
      const float* b = B + k * N;
      for (std::int64_t j = 0; j < N; ++j)
        acc[j] = round_lowp(cfg.low_dtype, acc[j] + round_lowp(cfg.low_dtype, ak * b[j]));
    }
    return;
  }
  const std::int64_t splits = std::max<std::int64_t>(cfg.split_k, 1);
  const std::int64_t bk_cfg = cfg.block_k > 0 ? cfg.block_k : std::max<std::int64_t>(K, 1);
  std::int64_t chunk = (K + splits - 1) / splits;
  chunk = (chunk + bk_cfg - 1) / bk_cfg * bk_cfg;
  for (std::int64_t s = 0; s < splits; ++s) {
    const std::int64_t k0 = s * chunk, k1 = std::min(K, k0 + chunk);
    if (k0 >= k1) break;
    std::fill(part, part + N, 0.0f);
    for (std::int64_t t = k0; t < k1; t += bk_cfg) {
      const std::int64_t t1 = std::min(k1, t + bk_cfg);
      if (cfg.bug == GemmBug::dropped_tail_k && t1 - t < bk_cfg) break;
      std::fill(tile, tile + N, 0.0f);
      for (std::int64_t k = t; k < t1; ++k) axpy_f32(a[k], B + k * N, tile, N);
      if (cfg.bug == GemmBug::acc_overwrite)
        std::copy(tile, tile + N, part);
      else
        add_f32(tile, part, N);
    }
    add_f32(part, acc, N);
  }
}

}  // namespace

std::vector<float> emulate_gemm(const float* A, const float* B, std::int64_t M, std::int64_t K,
                                std::int64_t N, const GemmEmulation& cfg) {
  std::vector<float> C(static_cast<std::size_t>(M * N));
  const std::int64_t row_work = std::max<std::int64_t>(1, K * N);
  parallel_for(
      M,
      [&](std::int64_t b, std::int64_t e) {
        std::vector<float> part(static_cast<std::size_t>(N)), tile(static_cast<std::size_t>(N));
        for (std::int64_t i = b; i < e; ++i)
          gemm_row(A + i * K, B, K, N, cfg, C.data() + i * N, part.data(), tile.data());
      },
      std::max<std::int64_t>(1, (1 << 16) / row_work));
  return C;
}

}  // namespace gpuemu::ops
