__global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void reduce(const float* x, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k]; __syncthreads(); }
  if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
__global__ void spill(const float* x, float* y, int n) {
  float a[64];
  for (int j = 0; j < 64; ++j) a[j] = x[(threadIdx.x + j*n) % 1000];
  float acc = 0;
  for (int j = 0; j < 64; ++j) acc += a[(j * 7 + n) & 63] * a[j];
  y[threadIdx.x] = acc + exp(acc) + sqrtf(acc) ;
}
