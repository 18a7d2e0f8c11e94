// The reference heap (core/ref_heap.hpp): large blocks are 2 MiB-aligned mappings kept for reuse
// when freed, within a byte limit; what RefVec and uninit_output give is unchanged by reuse.
#include "core/ref_heap.hpp"
#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/op.hpp"
#include "ops/op_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace gpuemu {
namespace {

using detail::RefHeap;
constexpr std::size_t k_mib = std::size_t{1} << 20;

bool aligned_2mib(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % RefHeap::k_huge_bytes == 0;
}

TEST(RefHeap, LargeBlocksAreAlignedAndReusedSmallOnesAreNot) {
  RefHeap heap(64 * k_mib);
  void* small = heap.allocate(1000);
  std::memset(small, 1, 1000);
  heap.deallocate(small, 1000);
  EXPECT_EQ(heap.cached_blocks(), 0u);

  void* a = heap.allocate(5 * k_mib + 8);  // mapped as 6 MiB
  ASSERT_TRUE(aligned_2mib(a));
  std::memset(a, 0x5a, 5 * k_mib + 8);  // every byte is writable
  heap.deallocate(a, 5 * k_mib + 8);
  EXPECT_EQ(heap.cached_bytes(), 6 * k_mib);
  // The same size, or anything that wastes at most a quarter of the block, takes it back.
  void* b = heap.allocate(6 * k_mib);
  EXPECT_EQ(b, a);
  EXPECT_EQ(heap.cached_bytes(), 0u);
  std::memset(b, 0x11, 6 * k_mib);
  heap.deallocate(b, 6 * k_mib);

  // A request the kept block would serve with too much waste gets a mapping of its own.
  void* c = heap.allocate(4 * k_mib);
  EXPECT_NE(c, a);
  EXPECT_EQ(heap.cached_bytes(), 6 * k_mib);
  heap.deallocate(c, 4 * k_mib);
  EXPECT_EQ(heap.cached_bytes(), 10 * k_mib);
  EXPECT_EQ(heap.cached_blocks(), 2u);
  heap.release_cache();
  EXPECT_EQ(heap.cached_bytes(), 0u);
  EXPECT_EQ(heap.cached_blocks(), 0u);
}

TEST(RefHeap, BestFitAmongKeptBlocks) {
  RefHeap heap(256 * k_mib);
  void* big = heap.allocate(40 * k_mib);
  void* mid = heap.allocate(34 * k_mib);
  heap.deallocate(big, 40 * k_mib);
  heap.deallocate(mid, 34 * k_mib);
  EXPECT_EQ(heap.allocate(32 * k_mib), mid);  // both fit; the smaller one is taken
  EXPECT_EQ(heap.allocate(32 * k_mib), big);
  heap.deallocate(mid, 32 * k_mib);  // freed with the requested size: the heap knows the real one
  heap.deallocate(big, 32 * k_mib);
  EXPECT_EQ(heap.cached_bytes(), 74 * k_mib);
  EXPECT_TRUE(RefHeap::fits(40 * k_mib, 32 * k_mib));
  EXPECT_FALSE(RefHeap::fits(42 * k_mib, 32 * k_mib));
  EXPECT_FALSE(RefHeap::fits(30 * k_mib, 32 * k_mib));
}

TEST(RefHeap, KeepsAtMostItsLimitDroppingTheOldestFirst) {
  RefHeap heap(16 * k_mib);
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(heap.allocate(6 * k_mib));
  for (void* p : blocks) heap.deallocate(p, 6 * k_mib);
  EXPECT_LE(heap.cached_bytes(), 16 * k_mib);
  EXPECT_EQ(heap.cached_blocks(), 2u);
  // The two most recently freed stayed.
  void* x = heap.allocate(6 * k_mib);
  void* y = heap.allocate(6 * k_mib);
  EXPECT_TRUE((x == blocks[3] && y == blocks[4]) || (x == blocks[4] && y == blocks[3]));
  heap.deallocate(x, 6 * k_mib);
  heap.deallocate(y, 6 * k_mib);

  // A block larger than the limit is never kept.
  void* huge = heap.allocate(20 * k_mib);
  heap.deallocate(huge, 20 * k_mib);
  EXPECT_LE(heap.cached_bytes(), 16 * k_mib);

  RefHeap off(0);
  void* p = off.allocate(8 * k_mib);
  std::memset(p, 1, 8 * k_mib);
  off.deallocate(p, 8 * k_mib);
  EXPECT_EQ(off.cached_bytes(), 0u);
}

TEST(RefHeap, ThreadsAllocatingAndFreeingTogether) {
  RefHeap heap(64 * k_mib);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&heap, t] {
      for (int i = 0; i < 50; ++i) {
        const std::size_t bytes = (4 + static_cast<std::size_t>((t + i) % 5)) * k_mib + 24;
        auto* p = static_cast<unsigned char*>(heap.allocate(bytes));
        // Each thread's block is its own while it holds it.
        std::memset(p, t + 1, bytes);
        for (std::size_t k = 0; k < bytes; k += 4096) ASSERT_EQ(p[k], t + 1);
        heap.deallocate(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(heap.cached_bytes(), 64 * k_mib);
}

// Through RefVec and the process's heap: a reused block is zeroed again by RefVec(n), and the
// outputs a reference returns are the same whether its blocks are fresh or reused.
TEST(RefHeap, RefVecOnReusedBlocks) {
  const std::int64_t n = 3 << 20;  // 24 MiB of doubles
  const double* first = nullptr;
  {
    RefVec v = ops::uninit_output(n);
    ASSERT_TRUE(aligned_2mib(v.data()));
    std::fill(v.begin(), v.end(), 7.0);
    first = v.data();
  }
  RefVec z(static_cast<std::size_t>(n));
  if (detail::ref_heap().cache_limit() >= static_cast<std::size_t>(n) * sizeof(double)) {
    EXPECT_EQ(z.data(), first);  // the block just freed
  }
  EXPECT_TRUE(std::all_of(z.begin(), z.end(), [](double x) { return x == 0.0; }));
  RefVec copy = z;
  EXPECT_EQ(copy, z);
}

// uninit_output's contract, for every op of the catalogue: with every fresh heap block filled
// with one pattern and then with another, each reference output (value and condition terms) comes
// out bit for bit the same, so no element is left unwritten. Generated cases of two distributions
// (special puts NaN and ±Inf in), with the budgets' sizes, some of them large blocks.
TEST(RefHeap, EveryReferenceWritesEveryElementItReturns) {
  auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
  ASSERT_TRUE(cat.ok()) << cat.error().message;
  struct PoisonOff {
    ~PoisonOff() { detail::ref_heap().set_poison(0); }
  } off;
  auto bits_of = [](const RefVec& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  };
  int compared = 0, large = 0;
  for (const OpSchema* schema : (*cat)->all()) {
    for (Distribution dist : {Distribution::regular, Distribution::special}) {
      FuzzOptions o;
      o.distribution = dist;
      CaseGenerator gen(*schema, o);
      for (std::int64_t i = 0; i < 3; ++i) {
        auto c = gen.generate(20261130, i);
        ASSERT_TRUE(c.ok()) << schema->name << ": " << c.error().message;
        std::vector<std::string> runs[2];
        for (int k = 0; k < 2; ++k) {
          detail::ref_heap().set_poison(k == 0 ? 0x7ff4dead0000beefULL : 0xfff0123456789abcULL);
          auto ref = compute_reference(*schema, c->inputs, c->attrs);
          detail::ref_heap().set_poison(0);
          if (!ref.ok()) {  // an input the op refuses: refused the same way both times
            runs[k].push_back("error: " + ref.error().message);
            continue;
          }
          for (const RefOutput& out : *ref) {
            runs[k].push_back(out.name + ":" + bits_of(out.value));
            runs[k].push_back(bits_of(out.c_acc));
            runs[k].push_back(bits_of(out.c_in));
            if (k == 0 && out.value.size() * sizeof(double) >= RefHeap::k_large_bytes) ++large;
          }
        }
        ASSERT_EQ(runs[0].size(), runs[1].size()) << schema->name;
        for (std::size_t j = 0; j < runs[0].size(); ++j)
          EXPECT_TRUE(runs[0][j] == runs[1][j])
              << schema->name << " (" << distribution_name(dist) << ", case " << i << "): output "
              << j << " depends on what its buffer held before";
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 200);
  std::printf("%d cases of %zu ops compared, %d with a large output\n", compared,
              (*cat)->all().size(), large);
}

}  // namespace
}  // namespace gpuemu
