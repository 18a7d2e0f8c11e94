// Fixture kernels for tests/cpp/lint_test.cpp. Each one exercises metrics the tests check; a
// `// @name` marker labels the line the tests expect line info to point at. Keep the markers on
// the lines they describe when editing.
#include <mma.h>

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {  // @saxpy
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];  // @saxpy_fma
}

extern "C" __global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float partial[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);  // @block_sum_atomic
}

extern "C" __global__ void fp64_axpy(double a, const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];  // @fp64_fma
}

extern "C" __global__ void fast_math(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __expf(x[i]) + rsqrtf(x[i]) + __sinf(x[i]) + __cosf(x[i]);
}

// PTX declares a 128-byte local array here, but ptxas keeps it in registers: no stack frame.
extern "C" __global__ void local_promoted(const int* index, const float* x, float* y) {
  float buffer[32];
  for (int j = 0; j < 32; ++j) buffer[j] = x[threadIdx.x * 32 + j];
  y[threadIdx.x] = buffer[index[threadIdx.x] & 31];
}

// Runtime-indexed in a loop: the array stays in local memory (ld/st.local, 256-byte stack frame).
extern "C" __global__ void local_array(const int* index, const float* x, float* y, int n) {
  float buffer[64];
  for (int j = 0; j < 64; ++j) buffer[j] = x[threadIdx.x * 64 + j];  // @local_store
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += buffer[index[k] & 63];
  y[threadIdx.x] = acc;
}

extern "C" __global__ void wmma_tile(const __half* a, const __half* b, float* c) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

// A C++ (mangled) kernel name.
template <int N>
__global__ void scale_by(float* y) {
  y[threadIdx.x] *= static_cast<float>(N);
}
template __global__ void scale_by<3>(float*);
