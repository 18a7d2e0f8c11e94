"""Kernels of the GPU corpus that are not Triton: a CUDA C++ softmax compiled by CuPy's RawKernel
(NVRTC), correct and with the one-element-per-thread bug, and JAX's own softmax (the JAX adapter).
Both take what ``fuzz_op_client_side`` hands ``run_op`` in their framework (``framework="cupy"`` /
``"jax"``)."""

from __future__ import annotations

from typing import Any, Dict

_SOURCE = r"""
extern "C" __global__ void softmax_rows(const float* x, float* y, int n, long long sxr, long long sxc,
                                        int one_per_thread) {
  // one block of 256 threads per row; block reductions through shared memory
  __shared__ float red[256];
  const float* xr = x + blockIdx.x * sxr;
  float* yr = y + (long long)blockIdx.x * n;
  int stride = one_per_thread ? n : blockDim.x;  // the bug: each thread takes one element only
  float m = __int_as_float(0xff800000);  // -inf
  for (int c = threadIdx.x; c < n; c += (one_per_thread ? n + blockDim.x : stride)) m = fmaxf(m, xr[c * sxc]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int c = threadIdx.x; c < n; c += (one_per_thread ? n + blockDim.x : stride)) sum += expf(xr[c * sxc] - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  sum = red[0];
  for (int c = threadIdx.x; c < n; c += blockDim.x) yr[c] = expf(xr[c * sxc] - m) / sum;
}
"""
_kernel = None


def softmax_cupy(a: Dict[str, Any], one_per_thread: bool = False) -> Any:
    import cupy as cp

    global _kernel
    if _kernel is None:
        _kernel = cp.RawKernel(_SOURCE, "softmax_rows")
    x = a["x"]
    r, n = x.shape
    y = cp.empty((r, n), dtype=cp.float32)
    sxr, sxc = x.strides[0] // x.itemsize, x.strides[1] // x.itemsize
    _kernel((r,), (256,), (x, y, cp.int32(n), cp.int64(sxr), cp.int64(sxc), cp.int32(int(one_per_thread))))
    return y


def softmax_jax(a: Dict[str, Any]) -> Any:
    import jax

    return jax.nn.softmax(a["x"], axis=a["dim"])
