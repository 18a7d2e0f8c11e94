#include "ops/op_util.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace gpuemu::ops {
namespace {

// n RefNoInit tags as a random-access range. A RefVec built from it allocates n doubles and
// writes none: RefAllocator default-initialises an element made from the tag, so the library's
// construction loop has an empty body and the compiler drops it (vector::resize, by contrast,
// constructs element by element with no argument).
struct NoInitIterator {
  using iterator_category = std::random_access_iterator_tag;
  using value_type = RefNoInit;
  using difference_type = std::ptrdiff_t;
  using pointer = const RefNoInit*;
  using reference = RefNoInit;
  std::ptrdiff_t i = 0;
  RefNoInit operator*() const { return {}; }
  NoInitIterator& operator++() {
    ++i;
    return *this;
  }
  NoInitIterator operator++(int) {
    NoInitIterator t = *this;
    ++i;
    return t;
  }
  friend difference_type operator-(NoInitIterator a, NoInitIterator b) { return a.i - b.i; }
  friend bool operator==(NoInitIterator a, NoInitIterator b) { return a.i == b.i; }
};

std::size_t count_of(std::int64_t n) {
  return static_cast<std::size_t>(std::max<std::int64_t>(n, 0));
}

// Asks for transparent huge pages over the 2 MiB-aligned inside of a buffer not yet touched
// (advisory only; small buffers are left alone).
void advise_huge_pages([[maybe_unused]] const double* data, [[maybe_unused]] std::size_t count) {
#ifdef __linux__
  constexpr std::uintptr_t k_huge = std::uintptr_t{2} << 20;
  if (count * sizeof(double) < 2 * k_huge) return;
  std::uintptr_t b = reinterpret_cast<std::uintptr_t>(data);
  std::uintptr_t e = b + count * sizeof(double);
  b = (b + k_huge - 1) & ~(k_huge - 1);
  e &= ~(k_huge - 1);
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
#endif
}

}  // namespace

Result<ReduceGeom> reduce_geom(const Shape& shape, std::int64_t dim) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  if (rank == 0) return ReduceGeom{};
  if (dim < -rank || dim >= rank)
    return make_error(ErrorCode::invalid_argument, "dim " + std::to_string(dim) +
                                                       " out of range for a tensor of rank " +
                                                       std::to_string(rank));
  if (dim < 0) dim += rank;
  ReduceGeom g;
  for (std::int64_t i = 0; i < rank; ++i) {
    if (i < dim)
      g.outer *= shape[i];
    else if (i == dim)
      g.len = shape[i];
    else
      g.inner *= shape[i];
  }
  return g;
}

Shape reduced_shape(const Shape& shape, std::int64_t dim, bool keepdim) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  if (rank == 0) return shape;
  if (dim < 0) dim += rank;
  Shape out;
  for (std::int64_t i = 0; i < rank; ++i) {
    if (i == dim) {
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(shape[i]);
    }
  }
  return out;
}

std::vector<double> round_all(DType dtype, std::vector<double> v) {
  for (auto& x : v) x = round_to(dtype, x);
  return v;
}

std::vector<RefOutput> single_output(DType dtype, Shape shape, RefVec value, RefVec c_acc,
                                     RefVec c_in) {
  RefOutput o;
  o.name = "out";
  o.dtype = dtype;
  o.shape = std::move(shape);
  o.value = std::move(value);
  o.c_acc = std::move(c_acc);
  o.c_in = std::move(c_in);
  std::vector<RefOutput>
      out;  // not `return {std::move(o)}`: an initializer_list copies its elements
  out.push_back(std::move(o));
  return out;
}

RefVec output_buffer(std::int64_t n) {
  const std::size_t count = count_of(n);
  RefVec v;
  v.reserve(count);
  advise_huge_pages(v.data(), count);
  v.resize(count);
  return v;
}

RefVec uninit_output(std::int64_t n) {
  const auto count = static_cast<std::ptrdiff_t>(count_of(n));
  RefVec v(NoInitIterator{0}, NoInitIterator{count});
  advise_huge_pages(v.data(), v.size());
  return v;
}

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

}  // namespace gpuemu::ops
