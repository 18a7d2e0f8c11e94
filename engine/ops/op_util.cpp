#include "ops/op_util.hpp"

#include "core/ref_heap.hpp"
#include "gpuemu/engine/strided.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

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

constexpr std::uintptr_t k_page = 4096, k_huge = detail::RefHeap::k_huge_bytes;

// Whether the kernel backs MADV_HUGEPAGE ranges with huge pages (transparent huge pages
// "always" or "madvise", not "never").
bool huge_pages_on() {
  static const bool on = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    return std::getline(f, line) && line.find("[never]") == std::string::npos;
  }();
  return on;
}

// Faults in the pages of a large buffer from every core, one write of 0.0 per page: one per
// 2 MiB where huge pages are on (the heap maps a large block 2 MiB-aligned and asks for them; the
// first write faults in the whole huge page), else one per 4 KiB. The kernel clears every fresh
// page; measured on our 2-core VMs (evidence/performance/oracle.md), doing it here in one parallel sweep
// costs about half what the same faults cost when they come one 2 MiB page at a time inside a
// compute loop, which each clear also slows down (it evicts the loop's rows from the caches). A
// block the heap reused has its pages already: the sweep is then a few writes.
void prefault(double* data, std::size_t count) {
  const auto base = reinterpret_cast<std::uintptr_t>(data), end = base + count * sizeof(double);
  const std::uintptr_t step = huge_pages_on() ? k_huge : k_page;
  // Units of 2 MiB of the buffer, claimed in turn by one thread per core.
  const auto units = static_cast<std::int64_t>((end - base + k_huge - 1) / k_huge);
  parallel_rows(units, 1, [&](std::int64_t ub, std::int64_t ue) {
    const std::uintptr_t from = base + static_cast<std::uintptr_t>(ub) * k_huge;
    const std::uintptr_t to = std::min(end, base + static_cast<std::uintptr_t>(ue) * k_huge);
    for (std::uintptr_t p = from; p < to; p += step) data[(p - base) / sizeof(double)] = 0.0;
  });
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
  round_elements(dtype, v.data(), v.size());
  return v;
}

std::vector<RefOutput> single_output(DType dtype, Shape shape, RefVec value, RefVec c_acc,
                                     RefVec c_in, std::vector<std::uint8_t> alt_nonfinite) {
  RefOutput o;
  o.name = "out";
  o.dtype = dtype;
  o.shape = std::move(shape);
  o.value = std::move(value);
  o.c_acc = std::move(c_acc);
  o.c_in = std::move(c_in);
  o.alt_nonfinite = std::move(alt_nonfinite);
  std::vector<RefOutput>
      out;  // not `return {std::move(o)}`: an initializer_list copies its elements
  out.push_back(std::move(o));
  return out;
}

ReferenceFn exact_reference(ReferenceFn reference) {
  return [reference = std::move(reference)](const RefContext& ctx) -> Result<std::vector<RefOutput>> {
    GPUEMU_TRY(std::vector<RefOutput> outs, reference(ctx));
    for (auto& o : outs) {
      o.exact = true;
      o.c_acc = RefVec();  // the bound is zero: no condition term is read
      o.c_in = RefVec();
    }
    return outs;
  };
}

RefVec output_buffer(std::int64_t n) {
  return RefVec(count_of(n));
}

RefVec uninit_output(std::int64_t n) {
  const auto count = static_cast<std::ptrdiff_t>(count_of(n));
  RefVec v(NoInitIterator{0}, NoInitIterator{count});
  if (v.size() * sizeof(double) >= detail::RefHeap::k_large_bytes) prefault(v.data(), v.size());
  return v;
}

}  // namespace gpuemu::ops

namespace gpuemu {
RefVec exact_values(const Tensor& t) {
  RefVec v = ops::uninit_output(t.numel());
  t.to_f64(v.data());
  return v;
}

RefVec exact_values_of(DType dtype, const std::byte* first, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> strides) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  RefVec v = ops::uninit_output(n);
  decode_strided(dtype, first, shape, strides, v.data());
  return v;
}
}  // namespace gpuemu

namespace gpuemu::ops {

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

}  // namespace gpuemu::ops
