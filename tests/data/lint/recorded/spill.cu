// Register pressure beyond the launch bound's budget: 32 live accumulators per thread plus
// addresses, capped at 32 registers by __launch_bounds__(1024, 2) -> spills.
__global__ void __launch_bounds__(1024, 2) pressure(const float* __restrict__ x, float* __restrict__ y, int n) {
  float acc[48];
#pragma unroll
  for (int j = 0; j < 48; ++j) acc[j] = x[threadIdx.x + j * n];
  for (int it = 0; it < n; ++it) {
#pragma unroll
    for (int j = 0; j < 48; ++j) acc[j] = acc[j] * acc[(j + 1) % 48] + x[it];
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 48; ++j) s += acc[j];
  y[threadIdx.x] = s;
}
