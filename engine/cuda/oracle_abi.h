/* The C interface between the engine and the optional CUDA backend of the fp64 oracle
 * (libgpuemu_oracle_cuda.so, engine/cuda/oracle_cuda.cu). The engine never links CUDA: it dlopens
 * the backend when the setting asks for it (GPUEMU_ORACLE=cuda, `gpuemu-daemon --oracle cuda`,
 * gpuemu.set_oracle("cuda")), so every binary runs on machines without a GPU or a CUDA runtime.
 * evidence/gpu/oracle.md says what it covers and how it was checked.
 *
 * Every function returns 0 on success; GPUEMU_ORACLE_DECLINED where the inputs hold a value the
 * GPU path does not take (Inf or NaN, or attention scores near fp64's range: the backend checks
 * on the device, after the copy); or writes a message into err (NUL-terminated, at most err_len
 * bytes) and returns 1. Either way but 0, the engine computes that piece on the CPU. The backend
 * serializes its calls (one stream); the engine may call it from any thread. */
#ifndef GPUEMU_ORACLE_ABI_H
#define GPUEMU_ORACLE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUEMU_ORACLE_ABI_VERSION 2
#define GPUEMU_ORACLE_DECLINED 2

/* One attention block with finite q, k, v and scale (the engine keeps the special-value paths on
 * the CPU): the fields of gpuemu::ops::AttentionBlock (attention_reference.hpp), whose comments
 * define every output. */
typedef struct gpuemu_attention_block {
  const double* q; /* [lq, d] */
  const double* k; /* [lk, d] */
  const double* v; /* [lk, d] */
  int64_t lq, lk, d;
  double scale;
  int causal;
  double p_min_normal, p_flush_weight, policy_weight;
  double* out;   /* [lq, d] */
  double* c_acc; /* [lq, d] */
  double* c_in;  /* [lq, d] */
  uint8_t* alt;  /* [lq, d]: k_alt_nan (1) is or-ed in where the CPU path would */
} gpuemu_attention_block;

typedef struct gpuemu_oracle_backend {
  int abi_version; /* GPUEMU_ORACLE_ABI_VERSION */
  /* Selects the device and creates the handles; a description ("NVIDIA H200, sm_90, 139 GiB,
   * cuBLAS 13.0") into desc. Called once, before anything else. */
  int (*init)(char* desc, size_t desc_len, char* err, size_t err_len);
  /* Row-major C[M,N] = op(A)·op(B) + beta·C, the contract of gpuemu::ops::dgemm_rm
   * (gemm_blas.hpp), through cuBLAS DGEMM. Host pointers. */
  int (*dgemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const double* A,
               int64_t lda, const double* B, int64_t ldb, double* C, int64_t ldc, double beta,
               char* err, size_t err_len);
  /* The value and the accumulation condition of a GEMM-shaped reference from one copy of its
   * operands: C = A·op(B) and C_abs = L(|A|)·L(|op(B)|) times each output's growth of its fp32
   * accumulation plus growth_weight (scale_by_growth of gemm_ops.cpp: max(sqrt(K), G) + weight, G
   * from the spread of the output's products), A [M,K] row-major (lda), B [K,N] or, when trans_b,
   * [N,K] (ldb), L(x) = lift_below for 0 < x < lift_below, else x (lift_subnormal_magnitudes of
   * gemm_blas.hpp; lift_below 0: none). Host pointers. */
  int (*gemm_abs)(int trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                  const double* B, int64_t ldb, double lift_below, double growth_weight, double* C,
                  int64_t ldc, double* C_abs, int64_t ldc_abs, char* err, size_t err_len);
  /* attention_block_reference (attention_reference.cpp) for a block of finite inputs. */
  int (*attention)(const gpuemu_attention_block* blk, char* err, size_t err_len);
  /* Seconds spent since init, summed over calls: copying inputs to the device, computing,
   * copying outputs back (the stream's timeline), the calls' wall time on the host after their
   * buffers are page-locked, and page-locking and unlocking the host buffers. */
  void (*timings)(double* seconds5);
} gpuemu_oracle_backend;

/* The one symbol the engine looks up. */
const gpuemu_oracle_backend* gpuemu_oracle_backend_v1(void);

#ifdef __cplusplus
}
#endif

#endif
