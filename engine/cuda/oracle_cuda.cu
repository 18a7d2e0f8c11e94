// The CUDA backend of the fp64 oracle (oracle_abi.h): cuBLAS DGEMM for the GEMM-shaped
// references, and attention_block_reference (engine/ops/attention_reference.cpp) as fp64
// kernels around five DGEMMs. Every output is the CPU path's, computed in the same fp64
// operations; only the order of the sums differs (a DGEMM's, a block reduction's), so the two
// agree to a few units of fp64's roundoff times the sums' magnitudes (tests/cpp/gpu_oracle_test.cpp
// checks 1e-12 on every op it covers; evidence/gpu/oracle.md has the numbers).
//
// One stream and one device arena, grown on demand and reused; calls are serialized by a mutex.

#include "oracle_abi.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

constexpr double k_u_fp32 = 0x1.0p-24;
constexpr double k_fp32_max = 3.4028234663852886e38;  // FLT_MAX
constexpr int k_threads = 256;

struct State {
  std::mutex mu;
  bool ready = false;
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  char* arena = nullptr;
  std::size_t arena_bytes = 0;
  cudaEvent_t ev[4] = {};   // a call's start, inputs on the device, computed, outputs back
  double seconds[5] = {};   // cumulative: inputs in, compute, outputs out, whole calls (host
                            // clock), page-locking and unlocking host buffers (host clock)
};
State g;

void put(char* err, std::size_t n, const char* what, const char* detail) {
  if (err && n) std::snprintf(err, n, "%s: %s", what, detail);
}

#define GPUEMU_CU(call)                                                   \
  do {                                                                    \
    const cudaError_t e_ = (call);                                        \
    if (e_ != cudaSuccess) {                                              \
      put(err, err_len, #call, cudaGetErrorString(e_));                   \
      return 1;                                                           \
    }                                                                     \
  } while (0)
#define GPUEMU_BLAS(call)                                                 \
  do {                                                                    \
    const cublasStatus_t s_ = (call);                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                    \
      put(err, err_len, #call, cublasGetStatusString(s_));                \
      return 1;                                                           \
    }                                                                     \
  } while (0)

// Carves 256-byte aligned pieces out of the arena; `reserve` first with the total.
struct Carver {
  char* at;
  template <typename T>
  T* take(std::int64_t n) {
    T* p = reinterpret_cast<T*>(at);
    at += (static_cast<std::size_t>(n) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
};
std::size_t aligned(std::int64_t n, std::size_t size) {
  return (static_cast<std::size_t>(n) * size + 255) / 256 * 256;
}

int reserve(std::size_t bytes, char* err, std::size_t err_len) {
  if (bytes <= g.arena_bytes) return 0;
  if (g.arena) {
    GPUEMU_CU(cudaStreamSynchronize(g.stream));
    GPUEMU_CU(cudaFree(g.arena));
    g.arena = nullptr;
    g.arena_bytes = 0;
  }
  const std::size_t want = bytes + bytes / 4;  // room to grow without a new allocation each time
  if (cudaMalloc(&g.arena, want) != cudaSuccess) {
    cudaGetLastError();  // clear the allocation failure; nothing else is affected
    g.arena = nullptr;
    GPUEMU_CU(cudaMalloc(&g.arena, bytes));
    g.arena_bytes = bytes;
    return 0;
  }
  g.arena_bytes = want;
  return 0;
}

// Whether to page-lock: $GPUEMU_ORACLE_CUDA_PIN, read at each call (0 turns it off; on by default).
bool pin_enabled() {
  const char* v = std::getenv("GPUEMU_ORACLE_CUDA_PIN");
  return !(v && std::strcmp(v, "0") == 0);
}

// Page-locks large host buffers for one call (the copies then run at the link's speed instead of
// through the driver's pageable staging; evidence/gpu/oracle.md measured both) and unlocks them once the
// stream is idle. A buffer that cannot be locked is copied as it is.
class Pinned {
 public:
  void add(const void* p, std::size_t bytes) {
    if (!m_on || bytes < (std::size_t{1} << 20)) return;
    const auto t0 = std::chrono::steady_clock::now();
    if (cudaHostRegister(const_cast<void*>(p), bytes, cudaHostRegisterDefault) == cudaSuccess)
      m_ptrs.push_back(const_cast<void*>(p));
    else
      cudaGetLastError();
    m_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ~Pinned() {
    if (m_ptrs.empty()) return;
    cudaStreamSynchronize(g.stream);
    const auto t0 = std::chrono::steady_clock::now();
    for (void* p : m_ptrs) cudaHostUnregister(p);
    m_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g.seconds[4] += m_seconds;  // the caller still holds g.mu
  }

 private:
  bool m_on = pin_enabled();
  double m_seconds = 0.0;
  std::vector<void*> m_ptrs;
};

// The phases of one call on the stream's timeline, added to g.seconds once it is done.
struct Timeline {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  Timeline() { cudaEventRecord(g.ev[0], g.stream); }
  void inputs_in() { cudaEventRecord(g.ev[1], g.stream); }
  void computed() { cudaEventRecord(g.ev[2], g.stream); }
  void outputs_out() { cudaEventRecord(g.ev[3], g.stream); }
  void add() {  // after the stream's synchronisation
    float ms[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) cudaEventElapsedTime(&ms[i], g.ev[i], g.ev[i + 1]);
    for (int i = 0; i < 3; ++i) g.seconds[i] += ms[i] / 1e3;
    g.seconds[3] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

void timings(double* seconds5) {
  std::lock_guard<std::mutex> lock(g.mu);
  for (int i = 0; i < 5; ++i) seconds5[i] = g.seconds[i];
}

// Row-major C[M,N] = op(A)·op(B) + beta·C on device pointers: cuBLAS is column-major, and a
// row-major matrix is its transpose there, so C^T = op(B)^T·op(A)^T.
cublasStatus_t gemm_rm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                       const double* A, std::int64_t lda, const double* B, std::int64_t ldb,
                       double* C, std::int64_t ldc, double beta) {
  const double one = 1.0;
  return cublasDgemm_64(g.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                        M, K, &one, B, std::max<std::int64_t>(ldb, 1), A,
                        std::max<std::int64_t>(lda, 1), &beta, C, std::max<std::int64_t>(ldc, 1));
}

// Input checks on the device, into flags[0] (any Inf or NaN: 1) and the bits of flags[1 + slot]
// (max |x|; non-negative doubles order as their bit patterns).
__global__ void check_kernel(const double* x, std::int64_t n, unsigned long long* flags, int slot) {
  double mx = 0.0;
  bool bad = false;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const double a = fabs(x[i]);
    bad |= !isfinite(a);
    mx = fmax(mx, a);  // fmax ignores a NaN; bad says it
  }
  for (int o = 16; o > 0; o /= 2) {
    mx = fmax(mx, __shfl_down_sync(0xffffffffu, mx, o));
    bad |= __shfl_down_sync(0xffffffffu, static_cast<int>(bad), o) != 0;
  }
  if (threadIdx.x % 32 == 0) {
    if (bad) atomicOr(&flags[0], 1ull);
    atomicMax(&flags[1 + slot], static_cast<unsigned long long>(__double_as_longlong(mx)));
  }
}

int grid_for(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>((n + k_threads - 1) / k_threads, 65535));
}

int check_grid(std::int64_t n) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>((n + 255) / 256, 1024)));
}

// Runs the checks of `count` device arrays and brings the flags back: flags[0] any non-finite,
// then each array's max |x|.
int check_inputs(const double* const* xs, const std::int64_t* ns, int count,
                 unsigned long long* dflags, double* max_abs, bool* nonfinite, char* err,
                 std::size_t err_len) {
  GPUEMU_CU(cudaMemsetAsync(dflags, 0, sizeof(unsigned long long) * (1 + count), g.stream));
  for (int i = 0; i < count; ++i)
    check_kernel<<<check_grid(ns[i]), 256, 0, g.stream>>>(xs[i], ns[i], dflags, i);
  GPUEMU_CU(cudaGetLastError());
  unsigned long long host[8] = {0};
  GPUEMU_CU(cudaMemcpyAsync(host, dflags, sizeof(unsigned long long) * (1 + count),
                            cudaMemcpyDeviceToHost, g.stream));
  GPUEMU_CU(cudaStreamSynchronize(g.stream));
  *nonfinite = host[0] != 0;
  for (int i = 0; i < count; ++i) std::memcpy(&max_abs[i], &host[1 + i], sizeof(double));
  return 0;
}

// y = L(|x|) in place over n elements (gemm_abs).
__global__ void abs_lift_kernel(double* x, std::int64_t n, double lift_below) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const double a = fabs(x[i]);
    x[i] = a > 0.0 && a < lift_below ? lift_below : a;
  }
}

// ---- the growth of a GEMM's fp32 accumulation (scale_by_growth of gemm_ops.cpp) -------------

// The extremes of |x| along one row or column: the smallest and the largest, each at its first
// occurrence (the CPU's strict comparisons scanning k upward).
struct Extremes {
  double lo, hi;
  long long at_lo, at_hi;
};

__device__ Extremes extremes_join(Extremes a, const Extremes& b) {
  if (b.lo < a.lo || (b.lo == a.lo && b.at_lo < a.at_lo)) a.lo = b.lo, a.at_lo = b.at_lo;
  if (b.hi > a.hi || (b.hi == a.hi && b.at_hi < a.at_hi)) a.hi = b.hi, a.at_hi = b.at_hi;
  return a;
}

// One block per line (grid-stride over lines): line r's element k at x[r * ld + k * step].
__global__ void extremes_kernel(const double* x, std::int64_t lines, std::int64_t len,
                                std::int64_t ld, std::int64_t step, Extremes* out) {
  __shared__ Extremes part[k_threads];
  for (std::int64_t r = blockIdx.x; r < lines; r += gridDim.x) {
    Extremes e{CUDART_INF, -1.0, LLONG_MAX, LLONG_MAX};
    for (std::int64_t k = threadIdx.x; k < len; k += blockDim.x) {
      const double v = fabs(x[r * ld + k * step]);
      e = extremes_join(e, Extremes{v, v, k, k});
    }
    part[threadIdx.x] = e;
    __syncthreads();
    for (int w = k_threads / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) part[threadIdx.x] = extremes_join(part[threadIdx.x], part[threadIdx.x + w]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[r] = part[0];
    __syncthreads();  // part is rewritten for the next line
  }
}

// The spread of each output's products, bounded from below from its row's and column's extremes
// (by_row, by_col of scale_by_growth), from the raw operands. Rounded operations without
// contraction, as the CPU computes them.
__global__ void spread_kernel(const double* A, const double* B, int trans_b, std::int64_t M,
                              std::int64_t N, std::int64_t K, const Extremes* rows,
                              const Extremes* cols, double* spread) {
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < M * N;
       e += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t i = e / N, j = e % N;
    const Extremes r = rows[i], c = cols[j];
    const auto b_at = [&](long long k) { return fabs(trans_b ? B[j * K + k] : B[k * N + j]); };
    const double by_row = __dsub_rn(__dmul_rn(r.hi, b_at(r.at_hi)), __dmul_rn(r.lo, b_at(r.at_lo)));
    const double by_col = __dsub_rn(__dmul_rn(fabs(A[i * K + c.at_hi]), c.hi),
                                    __dmul_rn(fabs(A[i * K + c.at_lo]), c.lo));
    spread[e] = fmax(0.0, fmax(by_row, by_col));
  }
}

// c_abs *= max(sqrt(K), G) + weight, G = SumGrowth::growth(K, c_abs / K, spread) (lowp_emu.hpp).
__global__ void growth_kernel(double* c_abs, const double* spread, std::int64_t n_out,
                              std::int64_t K, double weight) {
  const double n = static_cast<double>(K), root = sqrt(n);
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < n_out;
       e += std::int64_t{gridDim.x} * blockDim.x) {
    const double x = c_abs[e], mean_abs = __ddiv_rn(x, n), s = spread[e];
    double g = root;
    if (n > 1.0 && mean_abs > 0.0 && isfinite(mean_abs) && isfinite(s)) {
      const double k_star = __ddiv_rn(s, __dmul_rn(32.0 * 0x1.0p-24, mean_abs));
      if (k_star < n)
        g = __dadd_rn(root, __ddiv_rn(__dsub_rn(__dmul_rn(n, n), __dmul_rn(k_star, k_star)),
                                      __dmul_rn(2.0, n)));
    }
    c_abs[e] = __dmul_rn(x, __dadd_rn(fmax(root, g), weight));
  }
}

int init(char* desc, std::size_t desc_len, char* err, std::size_t err_len) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.ready) return 0;
  int count = 0;
  GPUEMU_CU(cudaGetDeviceCount(&count));
  if (count < 1) {
    put(err, err_len, "cudaGetDeviceCount", "no CUDA device");
    return 1;
  }
  GPUEMU_CU(cudaSetDevice(0));
  cudaDeviceProp prop{};
  GPUEMU_CU(cudaGetDeviceProperties(&prop, 0));
  GPUEMU_CU(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  GPUEMU_BLAS(cublasCreate(&g.blas));
  GPUEMU_BLAS(cublasSetStream(g.blas, g.stream));
  for (cudaEvent_t& e : g.ev) GPUEMU_CU(cudaEventCreate(&e));
  int blas_version = 0;
  GPUEMU_BLAS(cublasGetVersion(g.blas, &blas_version));
  if (desc && desc_len)
    std::snprintf(desc, desc_len, "%s, sm_%d%d, %.0f GiB, cuBLAS %d.%d.%d%s", prop.name, prop.major,
                  prop.minor, static_cast<double>(prop.totalGlobalMem) / (1u << 30),
                  blas_version / 10000, blas_version / 100 % 100, blas_version % 100,
                  pin_enabled() ? ", page-locked copies" : ", pageable copies");
  g.ready = true;
  return 0;
}

int dgemm(int trans_a, int trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double* C,
          std::int64_t ldc, double beta, char* err, std::size_t err_len) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.ready) {
    put(err, err_len, "dgemm", "the backend is not initialised");
    return 1;
  }
  if (M <= 0 || N <= 0 || K <= 0) {
    put(err, err_len, "dgemm", "empty shapes stay on the CPU");
    return 1;
  }
  // The stored extents (rows x columns) of A and B; packed on the device.
  const std::int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const std::int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  if (int rc = reserve(aligned(a_rows * a_cols, 8) + aligned(b_rows * b_cols, 8) + aligned(M * N, 8) +
                           aligned(8, 8),
                       err, err_len))
    return rc;
  Carver c{g.arena};
  double* dA = c.take<double>(a_rows * a_cols);
  double* dB = c.take<double>(b_rows * b_cols);
  double* dC = c.take<double>(M * N);
  auto* flags = c.take<unsigned long long>(8);
  const std::size_t d8 = sizeof(double);
  Pinned pinned;
  pinned.add(A, static_cast<std::size_t>((a_rows - 1) * lda + a_cols) * d8);
  pinned.add(B, static_cast<std::size_t>((b_rows - 1) * ldb + b_cols) * d8);
  pinned.add(C, static_cast<std::size_t>((M - 1) * ldc + N) * d8);
  Timeline tl;
  GPUEMU_CU(cudaMemcpy2DAsync(dA, a_cols * d8, A, lda * d8, a_cols * d8, a_rows,
                              cudaMemcpyHostToDevice, g.stream));
  GPUEMU_CU(cudaMemcpy2DAsync(dB, b_cols * d8, B, ldb * d8, b_cols * d8, b_rows,
                              cudaMemcpyHostToDevice, g.stream));
  if (beta != 0.0)
    GPUEMU_CU(cudaMemcpy2DAsync(dC, N * d8, C, ldc * d8, N * d8, M, cudaMemcpyHostToDevice,
                                g.stream));
  tl.inputs_in();
  {
    const double* xs[3] = {dA, dB, dC};
    const std::int64_t ns[3] = {a_rows * a_cols, b_rows * b_cols, M * N};
    double mx[3];
    bool nonfinite = false;
    if (int rc = check_inputs(xs, ns, beta != 0.0 ? 3 : 2, flags, mx, &nonfinite, err, err_len)) return rc;
    if (nonfinite) return GPUEMU_ORACLE_DECLINED;
  }
  GPUEMU_BLAS(gemm_rm(trans_a, trans_b, M, N, K, dA, a_cols, dB, b_cols, dC, N, beta));
  tl.computed();
  GPUEMU_CU(cudaMemcpy2DAsync(C, ldc * d8, dC, N * d8, N * d8, M, cudaMemcpyDeviceToHost,
                              g.stream));
  tl.outputs_out();
  GPUEMU_CU(cudaStreamSynchronize(g.stream));
  tl.add();
  return 0;
}

int gemm_abs(int trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const double* A,
             std::int64_t lda, const double* B, std::int64_t ldb, double lift_below,
             double growth_weight, double* C, std::int64_t ldc, double* C_abs,
             std::int64_t ldc_abs, char* err, std::size_t err_len) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.ready) {
    put(err, err_len, "gemm_abs", "the backend is not initialised");
    return 1;
  }
  if (M <= 0 || N <= 0 || K <= 0) {
    put(err, err_len, "gemm_abs", "empty shapes stay on the CPU");
    return 1;
  }
  const std::int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  if (int rc = reserve(aligned(M * K, 8) + aligned(b_rows * b_cols, 8) + aligned(M * N, 8) * 3 +
                           aligned(M + N, sizeof(Extremes)) + aligned(8, 8),
                       err, err_len))
    return rc;
  Carver c{g.arena};
  double* dA = c.take<double>(M * K);
  double* dB = c.take<double>(b_rows * b_cols);
  double* dC = c.take<double>(M * N);
  double* dC_abs = c.take<double>(M * N);
  double* dSpread = c.take<double>(M * N);
  auto* ext = c.take<Extremes>(M + N);
  auto* flags = c.take<unsigned long long>(8);
  const std::size_t d8 = sizeof(double);
  Pinned pinned;
  pinned.add(A, static_cast<std::size_t>((M - 1) * lda + K) * d8);
  pinned.add(B, static_cast<std::size_t>((b_rows - 1) * ldb + b_cols) * d8);
  pinned.add(C, static_cast<std::size_t>((M - 1) * ldc + N) * d8);
  pinned.add(C_abs, static_cast<std::size_t>((M - 1) * ldc_abs + N) * d8);
  Timeline tl;
  GPUEMU_CU(cudaMemcpy2DAsync(dA, K * d8, A, lda * d8, K * d8, M, cudaMemcpyHostToDevice, g.stream));
  GPUEMU_CU(cudaMemcpy2DAsync(dB, b_cols * d8, B, ldb * d8, b_cols * d8, b_rows,
                              cudaMemcpyHostToDevice, g.stream));
  tl.inputs_in();
  {
    const double* xs[2] = {dA, dB};
    const std::int64_t ns[2] = {M * K, b_rows * b_cols};
    double mx[2];
    bool nonfinite = false;
    if (int rc = check_inputs(xs, ns, 2, flags, mx, &nonfinite, err, err_len)) return rc;
    if (nonfinite) return GPUEMU_ORACLE_DECLINED;
  }
  GPUEMU_BLAS(gemm_rm(false, trans_b, M, N, K, dA, K, dB, b_cols, dC, N, 0.0));
  // The growth's spreads from the raw operands, before the lift rewrites them: the extremes of
  // each row of A and each column of op(B), then each output's.
  const int line_grid = static_cast<int>(std::min<std::int64_t>(std::max(M, N), 65535));
  extremes_kernel<<<line_grid, k_threads, 0, g.stream>>>(dA, M, K, K, 1, ext);
  extremes_kernel<<<line_grid, k_threads, 0, g.stream>>>(dB, N, K, trans_b ? K : 1, trans_b ? 1 : N,
                                                         ext + M);
  spread_kernel<<<grid_for(M * N), k_threads, 0, g.stream>>>(dA, dB, trans_b, M, N, K, ext, ext + M,
                                                             dSpread);
  GPUEMU_CU(cudaGetLastError());
  abs_lift_kernel<<<grid_for(M * K), k_threads, 0, g.stream>>>(dA, M * K, lift_below);
  abs_lift_kernel<<<grid_for(b_rows * b_cols), k_threads, 0, g.stream>>>(dB, b_rows * b_cols,
                                                                         lift_below);
  GPUEMU_CU(cudaGetLastError());
  GPUEMU_BLAS(gemm_rm(false, trans_b, M, N, K, dA, K, dB, b_cols, dC_abs, N, 0.0));
  growth_kernel<<<grid_for(M * N), k_threads, 0, g.stream>>>(dC_abs, dSpread, M * N, K,
                                                             growth_weight);
  GPUEMU_CU(cudaGetLastError());
  tl.computed();
  GPUEMU_CU(cudaMemcpy2DAsync(C, ldc * d8, dC, N * d8, N * d8, M, cudaMemcpyDeviceToHost, g.stream));
  GPUEMU_CU(cudaMemcpy2DAsync(C_abs, ldc_abs * d8, dC_abs, N * d8, N * d8, M,
                              cudaMemcpyDeviceToHost, g.stream));
  tl.outputs_out();
  GPUEMU_CU(cudaStreamSynchronize(g.stream));
  tl.add();
  return 0;
}

// ---- attention ---------------------------------------------------------------------------------

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ double warp_max(double v) {
  for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum or max of v, the result in every thread. `scratch` holds k_threads / 32 doubles.
template <bool Max>
__device__ double block_reduce(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = Max ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read from the previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double r = scratch[0];
  for (int w = 1; w < k_threads / 32; ++w) r = Max ? fmax(r, scratch[w]) : r + scratch[w];
  return r;
}

__device__ std::int64_t attended(std::int64_t i, std::int64_t lk, int causal) {
  return causal ? (i + 1 < lk ? i + 1 : lk) : lk;
}

__global__ void abs_kernel(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = fabs(x[i]);
}

// Per column c of v: |v|, Σ_j |v_jc| and the prefix maxima max_{j' <= j} |v_j'c| that unresolved
// rows read, in three passes over chunks of k_col_rows rows (a thread per column and chunk): the
// chunks' sums and maxima, then per column a scan over the chunks, then the prefix maxima within
// each chunk from its carry. The sum's order differs from the CPU's (j ascending): a sum of
// non-negative terms, so only in its last bits.
constexpr std::int64_t k_col_rows = 32;

__global__ void v_chunks_kernel(const double* v, std::int64_t lk, std::int64_t d, double* abs_v,
                                double* chunk_sum, double* chunk_max) {
  const std::int64_t c = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x, ch = blockIdx.y;
  if (c >= d) return;
  double sum = 0.0, mx = 0.0;
  const std::int64_t j1 = (ch + 1) * k_col_rows < lk ? (ch + 1) * k_col_rows : lk;
  for (std::int64_t j = ch * k_col_rows; j < j1; ++j) {
    const double a = fabs(v[j * d + c]);
    abs_v[j * d + c] = a;
    sum += a;
    mx = fmax(mx, a);
  }
  chunk_sum[ch * d + c] = sum;
  chunk_max[ch * d + c] = mx;
}

// Per column: the total, and each chunk's carry (the max of the chunks before it), in place.
__global__ void v_scan_kernel(std::int64_t chunks, std::int64_t d, const double* chunk_sum,
                              double* chunk_max, double* sum_abs_v) {
  const std::int64_t c = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
  if (c >= d) return;
  double sum = 0.0, carry = 0.0;
  for (std::int64_t ch = 0; ch < chunks; ++ch) {
    sum += chunk_sum[ch * d + c];
    const double m = chunk_max[ch * d + c];
    chunk_max[ch * d + c] = carry;
    carry = fmax(carry, m);
  }
  sum_abs_v[c] = sum;
}

__global__ void v_prefix_kernel(const double* abs_v, std::int64_t lk, std::int64_t d,
                                const double* carry, double* prefix_max_v) {
  const std::int64_t c = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x, ch = blockIdx.y;
  if (c >= d) return;
  double mx = carry[ch * d + c];
  const std::int64_t j1 = (ch + 1) * k_col_rows < lk ? (ch + 1) * k_col_rows : lk;
  for (std::int64_t j = ch * k_col_rows; j < j1; ++j) {
    mx = fmax(mx, abs_v[j * d + c]);
    prefix_max_v[j * d + c] = mx;
  }
}

struct RowArgs {
  double* S;        // [rows, lk]: q·kᵀ in, the scaled scores out
  const double* E;  // [rows, lk]: |q|·|k|ᵀ
  double* P;
  double* W;
  double* P_in;  // null unless the flush weight is on
  std::int64_t lk, r0;
  double scale, abs_scale, root_d, p_min_normal, p_flush_weight, policy_weight;
  int causal;
  double* tail;
  double* e_max_row;
  double* dot_max_row;
  unsigned char* unresolved;
  unsigned char* row_nan;  // [rows]
};

// One block per query row: the row loop of attention_block_reference for finite inputs.
__global__ void rows_kernel(RowArgs a) {
  __shared__ double scratch[k_threads / 32];
  const std::int64_t i = blockIdx.x, lk = a.lk;
  const std::int64_t n = attended(a.r0 + i, lk, a.causal);
  double* s = a.S + i * lk;
  const double* e = a.E + i * lk;
  double* p = a.P + i * lk;
  double* w = a.W + i * lk;
  double* pin = a.P_in ? a.P_in + i * lk : nullptr;
  double m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < n; j += k_threads) {
    s[j] *= a.scale;
    m = fmax(m, s[j]);
  }
  // A masked score whose fp32 dot product may overflow makes the math formulation's row NaN.
  double masked_nan = 0.0;
  for (std::int64_t j = n + threadIdx.x; j < lk; j += k_threads) {
    const double sj = s[j] * a.scale;
    if (isnan(sj) || sj == INFINITY || (isfinite(e[j]) && fmax(1.0, a.abs_scale) * e[j] >= k_fp32_max / 2))
      masked_nan = 1.0;
  }
  m = block_reduce<true>(m, scratch);
  masked_nan = block_reduce<true>(masked_nan, scratch);
  double sum = 0.0;
  for (std::int64_t j = threadIdx.x; j < n; j += k_threads) sum += exp(s[j] - m);
  sum = block_reduce<false>(sum, scratch);
  double e_bar = 0.0, e_max = 0.0, spread_max = 0.0, dot_max = 0.0;
  for (std::int64_t j = threadIdx.x; j < n; j += k_threads) {
    const double pj = exp(s[j] - m) / sum;
    dot_max = fmax(dot_max, e[j]);
    const double e_j = a.abs_scale * e[j] * a.root_d;
    p[j] = pj;
    w[j] = pj * (fabs(s[j] - m) + e_j);
    e_bar += pj * e_j;
    e_max = fmax(e_max, e_j);
    spread_max = fmax(spread_max, fabs(s[j] - m) + e_j);
    if (pin) pin[j] = pj < a.p_min_normal ? pj + a.p_flush_weight : pj;
  }
  for (std::int64_t j = n + threadIdx.x; j < lk; j += k_threads) {
    p[j] = 0.0;
    w[j] = 0.0;
    if (pin) pin[j] = 0.0;
  }
  e_bar = block_reduce<false>(e_bar, scratch);
  e_max = block_reduce<true>(e_max, scratch);
  spread_max = block_reduce<true>(spread_max, scratch);
  dot_max = block_reduce<true>(dot_max, scratch);
  if (threadIdx.x == 0) {
    a.unresolved[i] = k_u_fp32 * spread_max > 2.0;
    a.e_max_row[i] = e_max;
    a.dot_max_row[i] = dot_max;
    a.tail[i] = 2.0 * sqrt(static_cast<double>(n > 1 ? n : 1)) + a.policy_weight + e_bar;
    a.row_nan[i] = masked_nan != 0.0;
  }
}

__device__ double overflow_guard(double c_acc, double intermediate) {
  return intermediate >= k_fp32_max / 4 && isfinite(intermediate) ? fmax(c_acc, intermediate)
                                                                  : c_acc;
}

// c_acc's tail, its overflow guard and the unresolved rows' term, per element of the chunk.
__global__ void finish_kernel(double* c_acc, const double* c_in, std::int64_t rows, std::int64_t d,
                              std::int64_t r0, std::int64_t lk, int causal, const double* tail,
                              const double* sum_abs_v, const double* dot_max_row,
                              const unsigned char* unresolved, const double* prefix_max_v,
                              const double* e_max_row) {
  for (std::int64_t x = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; x < rows * d;
       x += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t i = x / d, c = x % d;
    double acc = c_acc[x] + tail[i] * c_in[x];
    acc = overflow_guard(acc, fmax(sum_abs_v[c], dot_max_row[i]));
    if (unresolved[i]) {
      const std::int64_t n = attended(r0 + i, lk, causal);
      acc += prefix_max_v[(n - 1) * d + c] / k_u_fp32 + e_max_row[i];
    }
    c_acc[x] = acc;
  }
}

int attention(const gpuemu_attention_block* blk, char* err, std::size_t err_len) {
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.ready) {
    put(err, err_len, "attention", "the backend is not initialised");
    return 1;
  }
  const std::int64_t lq = blk->lq, lk = blk->lk, d = blk->d;
  if (lq <= 0 || lk <= 0 || d <= 0) {
    put(err, err_len, "attention", "empty blocks stay on the CPU");
    return 1;
  }
  // Rows per chunk: S, E, P, W (and P_in) of rows x lk doubles each, at most 2^25 elements.
  const std::int64_t chunk = std::max<std::int64_t>(1, std::min(lq, (std::int64_t{1} << 25) / lk));
  const bool flush = blk->p_flush_weight > 0.0;
  const std::int64_t mat = chunk * lk;
  const std::int64_t col_chunks = (lk + k_col_rows - 1) / k_col_rows;
  const std::size_t bytes = aligned(lq * d, 8) * 4 + aligned(lk * d, 8) * 5 + aligned(d, 8) +
                            aligned(col_chunks * d, 8) * 2 +
                            aligned(mat, 8) * (flush ? 5 : 4) + aligned(chunk, 8) * 3 +
                            aligned(chunk, 1) + aligned(lq, 1) + aligned(chunk * d, 8) +
                            aligned(8, 8);
  if (int rc = reserve(bytes, err, err_len)) return rc;
  Carver cv{g.arena};
  double* q = cv.take<double>(lq * d);
  double* out = cv.take<double>(lq * d);
  double* c_in = cv.take<double>(lq * d);
  double* c_acc = cv.take<double>(lq * d);
  double* k = cv.take<double>(lk * d);
  double* v = cv.take<double>(lk * d);
  double* abs_k = cv.take<double>(lk * d);
  double* abs_v = cv.take<double>(lk * d);
  double* prefix_max_v = cv.take<double>(lk * d);
  double* sum_abs_v = cv.take<double>(d);
  double* chunk_sum = cv.take<double>(col_chunks * d);
  double* chunk_max = cv.take<double>(col_chunks * d);
  double* S = cv.take<double>(mat);
  double* E = cv.take<double>(mat);
  double* P = cv.take<double>(mat);
  double* W = cv.take<double>(mat);
  double* P_in = flush ? cv.take<double>(mat) : nullptr;
  double* tail = cv.take<double>(chunk);
  double* e_max_row = cv.take<double>(chunk);
  double* dot_max_row = cv.take<double>(chunk);
  unsigned char* unresolved = cv.take<unsigned char>(chunk);
  unsigned char* row_nan = cv.take<unsigned char>(lq);
  double* abs_q = cv.take<double>(chunk * d);
  auto* flags = cv.take<unsigned long long>(8);
  const std::size_t d8 = sizeof(double);
  Pinned pinned;
  for (const void* p : {static_cast<const void*>(blk->q), static_cast<const void*>(blk->out),
                        static_cast<const void*>(blk->c_in), static_cast<const void*>(blk->c_acc)})
    pinned.add(p, static_cast<std::size_t>(lq * d) * d8);
  pinned.add(blk->k, static_cast<std::size_t>(lk * d) * d8);
  pinned.add(blk->v, static_cast<std::size_t>(lk * d) * d8);
  Timeline tl;
  GPUEMU_CU(cudaMemcpyAsync(q, blk->q, lq * d * d8, cudaMemcpyHostToDevice, g.stream));
  GPUEMU_CU(cudaMemcpyAsync(k, blk->k, lk * d * d8, cudaMemcpyHostToDevice, g.stream));
  GPUEMU_CU(cudaMemcpyAsync(v, blk->v, lk * d * d8, cudaMemcpyHostToDevice, g.stream));
  tl.inputs_in();
  {  // finite inputs whose scores stay far inside fp64's range; the rest is the CPU's
    const double* xs[3] = {q, k, v};
    const std::int64_t ns[3] = {lq * d, lk * d, lk * d};
    double mx[3];
    bool nonfinite = false;
    if (int rc = check_inputs(xs, ns, 3, flags, mx, &nonfinite, err, err_len)) return rc;
    if (nonfinite || !std::isfinite(blk->scale) ||
        !(mx[0] * mx[1] * static_cast<double>(d) * std::max(1.0, std::fabs(blk->scale)) < 1e300))
      return GPUEMU_ORACLE_DECLINED;
  }
  abs_kernel<<<grid_for(lk * d), k_threads, 0, g.stream>>>(k, abs_k, lk * d);
  {
    const dim3 grid(static_cast<unsigned>((d + 63) / 64), static_cast<unsigned>(col_chunks));
    v_chunks_kernel<<<grid, 64, 0, g.stream>>>(v, lk, d, abs_v, chunk_sum, chunk_max);
    v_scan_kernel<<<static_cast<unsigned>((d + 63) / 64), 64, 0, g.stream>>>(col_chunks, d, chunk_sum,
                                                                          chunk_max, sum_abs_v);
    v_prefix_kernel<<<grid, 64, 0, g.stream>>>(abs_v, lk, d, chunk_max, prefix_max_v);
  }
  GPUEMU_CU(cudaGetLastError());
  const double root_d = std::sqrt(static_cast<double>(d)) + blk->policy_weight;
  for (std::int64_t r0 = 0; r0 < lq; r0 += chunk) {
    const std::int64_t rows = std::min(chunk, lq - r0);
    const double* qc = q + r0 * d;
    GPUEMU_BLAS(gemm_rm(false, true, rows, lk, d, qc, d, k, d, S, lk, 0.0));
    abs_kernel<<<grid_for(rows * d), k_threads, 0, g.stream>>>(qc, abs_q, rows * d);
    GPUEMU_BLAS(gemm_rm(false, true, rows, lk, d, abs_q, d, abs_k, d, E, lk, 0.0));
    RowArgs ra{S, E, P, W, P_in, lk, r0, blk->scale, std::fabs(blk->scale), root_d,
               blk->p_min_normal, blk->p_flush_weight, blk->policy_weight, blk->causal,
               tail, e_max_row, dot_max_row, unresolved, row_nan + r0};
    rows_kernel<<<static_cast<unsigned>(rows), k_threads, 0, g.stream>>>(ra);
    GPUEMU_CU(cudaGetLastError());
    double* o = out + r0 * d;
    double* ci = c_in + r0 * d;
    double* ca = c_acc + r0 * d;
    GPUEMU_BLAS(gemm_rm(false, false, rows, d, lk, P, lk, v, d, o, d, 0.0));
    GPUEMU_BLAS(gemm_rm(false, false, rows, d, lk, flush ? P_in : P, lk, abs_v, d, ci, d, 0.0));
    GPUEMU_BLAS(gemm_rm(false, false, rows, d, lk, W, lk, abs_v, d, ca, d, 0.0));
    finish_kernel<<<grid_for(rows * d), k_threads, 0, g.stream>>>(
        ca, ci, rows, d, r0, lk, blk->causal, tail, sum_abs_v, dot_max_row, unresolved,
        prefix_max_v, e_max_row);
    GPUEMU_CU(cudaGetLastError());
  }
  tl.computed();
  GPUEMU_CU(cudaMemcpyAsync(blk->out, out, lq * d * d8, cudaMemcpyDeviceToHost, g.stream));
  GPUEMU_CU(cudaMemcpyAsync(blk->c_in, c_in, lq * d * d8, cudaMemcpyDeviceToHost, g.stream));
  GPUEMU_CU(cudaMemcpyAsync(blk->c_acc, c_acc, lq * d * d8, cudaMemcpyDeviceToHost, g.stream));
  // row_nan travels as a byte per row; the caller's alt is [lq, d].
  std::vector<unsigned char> nan_rows(static_cast<std::size_t>(lq));
  GPUEMU_CU(cudaMemcpyAsync(nan_rows.data(), row_nan, nan_rows.size(), cudaMemcpyDeviceToHost,
                            g.stream));
  tl.outputs_out();
  GPUEMU_CU(cudaStreamSynchronize(g.stream));
  tl.add();
  if (blk->alt)
    for (std::int64_t i = 0; i < lq; ++i)
      if (nan_rows[static_cast<std::size_t>(i)])
        for (std::int64_t c = 0; c < d; ++c) blk->alt[i * d + c] |= 1;  // k_alt_nan
  return 0;
}

const gpuemu_oracle_backend k_backend = {GPUEMU_ORACLE_ABI_VERSION, init, dgemm, gemm_abs,
                                         attention, timings};

}  // namespace

extern "C" const gpuemu_oracle_backend* gpuemu_oracle_backend_v1(void) { return &k_backend; }
