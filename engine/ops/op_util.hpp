// Small helpers shared by the built-in op implementations.
#pragma once

#include "core/parallel.hpp"
#include "gpuemu/engine/op.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gpuemu::ops {

// A tensor seen as [outer, len, inner] around one reduced dim.
struct ReduceGeom {
  std::int64_t outer = 1, len = 1, inner = 1;
  std::int64_t index(std::int64_t o, std::int64_t k, std::int64_t i) const {
    return (o * len + k) * inner + i;
  }
};

// The geometry of reducing `shape` over `dim` (negative counts from the end). Fails on a bad dim.
Result<ReduceGeom> reduce_geom(const Shape& shape, std::int64_t dim);
// `shape` without `dim` (or with it set to 1 when keepdim).
Shape reduced_shape(const Shape& shape, std::int64_t dim, bool keepdim);

// Round every value to `dtype` (controls round their outputs once, like a kernel's final store).
std::vector<double> round_all(DType dtype, std::vector<double> v);
inline float f32(double x) {
  return static_cast<float>(x);
}

// One output named "out" with the given shape, dtype and values; condition vectors and the
// alternative non-finite results (RefOutput::alt_nonfinite) optional.
std::vector<RefOutput> single_output(DType dtype, Shape shape, RefVec value, RefVec c_acc = {},
                                     RefVec c_in = {},
                                     std::vector<std::uint8_t> alt_nonfinite = {});

// `reference`'s outputs marked exact (RefOutput::exact): ops that return one of their inputs.
ReferenceFn exact_reference(ReferenceFn reference);

inline bool finite(double x) {
  return std::isfinite(x);
}

inline constexpr double k_neg_inf = -std::numeric_limits<double>::infinity();

// Whether all of x[0..n) are finite.
inline bool all_finite(const double* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// Buffers of n doubles for a reference's outputs (0 for n < 0), from the reference heap
// (core/ref_heap.hpp): a large one is a 2 MiB-aligned mapping with transparent huge pages, a
// fresh 128 MiB vector otherwise costing 32768 page faults (~150-220 ms on our 2-core VMs against
// ~30 ms with huge pages, evidence/performance/oracle.md), or a block an earlier output freed, which has its
// pages already.
//
// output_buffer: zeroed, like RefVec(n): the zero-fill runs on the calling thread, which also
// takes every page fault of a fresh block (the kernel zeroes each fresh page as well).
RefVec output_buffer(std::int64_t n);
// uninit_output: the same buffer with no element written (RefAllocator's RefNoInit); a large one
// has its pages faulted in by every core first (one write per page: the kernel's clearing of
// fresh pages done in one parallel sweep, which measured cheaper than leaving it to the first
// touches inside the loop that computes the output). Contract: every element must be written by
// the caller, on every path, before anything reads it (an element left out holds whatever the
// heap, an earlier output or that sweep left there). Where a path may skip elements, use
// output_buffer.
RefVec uninit_output(std::int64_t n);

// Whether this CPU runs AVX2. Reference loops written with the vd4 vector type (vec_exp.hpp) are
// compiled twice, for AVX2 and for the x86-64 baseline, and pick one at run time; both do the same
// IEEE operations in the same order (no FMA), so their results are bit-identical.
bool cpu_has_avx2();
// Calls fn(begin, end) over [0, n) in blocks of `block` rows that one thread per core claims in
// turn: unlike parallel_for's fixed halves, a thread that the OS runs less (a loaded machine) just
// takes fewer blocks instead of holding back the whole call. Small work runs inline.
template <typename Fn>
void parallel_rows(std::int64_t n, std::int64_t block, Fn&& fn) {
  block = std::max<std::int64_t>(block, 1);
  if (n <= block || worker_count() <= 1) {
    if (n > 0) fn(std::int64_t{0}, n);
    return;
  }
  std::atomic<std::int64_t> next{0};
  const auto tasks = std::min<std::int64_t>(worker_count(), (n + block - 1) / block);
  parallel_for(
      tasks,
      [&](std::int64_t, std::int64_t) {
        for (std::int64_t b = next.fetch_add(block); b < n; b = next.fetch_add(block))
          fn(b, std::min(n, b + block));
      },
      1);
}

#if defined(__x86_64__) || defined(__i386__)
#define GPUEMU_TARGET_AVX2 [[gnu::target("avx2")]]
#else
#define GPUEMU_TARGET_AVX2
#endif

}  // namespace gpuemu::ops
