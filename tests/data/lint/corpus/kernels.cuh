// The evidence corpus of evidence/lint/README.md: four small kernels and the mutations the variant
// files switch on. Semantic mutations change what a kernel computes without changing its shape;
// structural ones change its shape. Each variant .cu defines one GPUEMU_MUT_* and includes this.
#pragma once

// --- scale_bias: y = x * scale + bias, GPUEMU_ITEMS elements per thread -------------------------
#if defined(GPUEMU_MUT_WRONG_CONSTANT)
#define GPUEMU_BIAS 0.25f  // semantic: the reference adds 0.5f
#else
#define GPUEMU_BIAS 0.5f
#endif
#if defined(GPUEMU_MUT_MORE_REGISTERS)
#define GPUEMU_ITEMS 8  // structural: thread coarsening, 8 loads in flight per thread
#else
#define GPUEMU_ITEMS 1
#endif

extern "C" __global__ void scale_bias(const float* x, float scale, const float* scale_table,
                                      float* y, int n) {
  int base = (blockIdx.x * blockDim.x + threadIdx.x) * GPUEMU_ITEMS;
  float v[GPUEMU_ITEMS];
#pragma unroll
  for (int t = 0; t < GPUEMU_ITEMS; ++t) v[t] = base + t < n ? x[base + t] : 0.0f;
#pragma unroll
  for (int t = 0; t < GPUEMU_ITEMS; ++t) {
    if (base + t >= n) continue;
#if defined(GPUEMU_MUT_EXTRA_LOAD)
    float s = scale_table[(base + t) % 64];  // structural: one more global load per element
#else
    float s = scale;
#endif
    y[base + t] = v[t] * s + GPUEMU_BIAS;
  }
}

// --- causal_softmax_row: one block per row, keys j <= row are visible --------------------------
extern "C" __global__ void causal_softmax_row(const float* scores, float* probs, int n) {
  __shared__ float reduce[256];
  int row = blockIdx.x;
  const float* s = scores + static_cast<long>(row) * n;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
#if defined(GPUEMU_MUT_FLIPPED_MASK)
    bool visible = j < row;  // semantic: the diagonal is masked out
#else
    bool visible = j <= row;
#endif
    if (visible) m = fmaxf(m, s[j]);
  }
  reduce[threadIdx.x] = m;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) reduce[threadIdx.x] = fmaxf(reduce[threadIdx.x], reduce[threadIdx.x + k]);
    __syncthreads();
  }
  m = reduce[0];
  __syncthreads();
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += j <= row ? __expf(s[j] - m) : 0.0f;
  reduce[threadIdx.x] = sum;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) reduce[threadIdx.x] += reduce[threadIdx.x + k];
    __syncthreads();
  }
  sum = reduce[0];
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    probs[static_cast<long>(row) * n + j] = j <= row ? __expf(s[j] - m) / sum : 0.0f;
}

// --- row_sum: a warp per row, shuffle reduction ------------------------------------------------
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int n) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float acc = 0.0f;
#if defined(GPUEMU_MUT_OFF_BY_ONE)
  for (int j = threadIdx.x % 32; j <= n; j += 32)  // semantic: also reads x[row][n]
#else
  for (int j = threadIdx.x % 32; j < n; j += 32)
#endif
    acc += x[static_cast<long>(row) * n + j];
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if (threadIdx.x % 32 == 0) out[row] = acc;
}

// --- tiled_matmul: C = A * B, 16x16 shared-memory tiles, one output per thread --------------
// SPILLS keeps 16 independent partial sums per output (an ILP rewrite: same tiles, same shared
// memory, more live values) under a launch bound that leaves 32 registers per thread.
#if defined(GPUEMU_MUT_SPILLS)
#define GPUEMU_ACC 16
#else
#define GPUEMU_ACC 1
#endif
#if defined(GPUEMU_MUT_SPILLS)
#define GPUEMU_BOUNDS __launch_bounds__(256, 8)  // at most 32 registers per thread
#else
#define GPUEMU_BOUNDS
#endif

extern "C" __global__ void GPUEMU_BOUNDS tiled_matmul(const float* a, const float* b, float* c,
                                                      int m, int n, int k) {
  __shared__ float ta[16][16];
  __shared__ float tb[16][16];
  int col = blockIdx.x * 16 + threadIdx.x;
  int row = blockIdx.y * 16 + threadIdx.y;
  float acc[GPUEMU_ACC];
#pragma unroll
  for (int t = 0; t < GPUEMU_ACC; ++t) acc[t] = 0.0f;
  for (int k0 = 0; k0 < k; k0 += 16) {
    ta[threadIdx.y][threadIdx.x] = a[static_cast<long>(row) * k + k0 + threadIdx.x];
    tb[threadIdx.y][threadIdx.x] = b[static_cast<long>(k0 + threadIdx.y) * n + col];
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk)
#if defined(GPUEMU_MUT_SWAPPED_INDEX)
      acc[kk % GPUEMU_ACC] += ta[threadIdx.y][kk] * tb[threadIdx.x][kk];  // semantic: B transposed
#else
      acc[kk % GPUEMU_ACC] += ta[threadIdx.y][kk] * tb[kk][threadIdx.x];
#endif
    __syncthreads();
  }
  float sum = 0.0f;
#pragma unroll
  for (int t = 0; t < GPUEMU_ACC; ++t) sum += acc[t];
  if (row < m && col < n) c[static_cast<long>(row) * n + col] = sum;
}
