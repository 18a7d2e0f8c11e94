// The heap behind RefAllocator (gpuemu/engine/op.hpp): where every reference output lives.
//
// Small blocks come from operator new. A large block (from k_large_bytes) is its own mapping,
// 2 MiB-aligned and rounded up to whole 2 MiB, asked to be backed by transparent huge pages; a
// mid-sized one (from k_mid_bytes) is a plain mapping in whole 64 KiB. When either is freed it is
// kept, up to a byte limit, and handed to the next request it fits. A fuzz run or a benchmark
// calls the references over and over with outputs of similar sizes: a fresh mapping costs a page
// fault per page, and the kernel clears every page it faults in, which for a 4096 x 4096 softmax
// was a third of the call (evidence/performance/oracle.md). Kept blocks stay resident up to k_mid_kept_bytes
// of mid-sized ones and k_resident_bytes of large ones; past that a kept large block has its pages
// marked MADV_FREE, so the kernel may take them back under memory pressure (they then come back
// as zero pages on the next write) instead of swapping them out. Reference inputs (RefArg), outputs and the verdict's per-element
// errors all live here.
//
// What a reused block holds is unspecified: RefVec value-initialises as any std::vector, and
// uninit_output's contract (every element written before it is read) is what it always was.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gpuemu::detail {

class RefHeap {
 public:
  static constexpr std::size_t k_huge_bytes = std::size_t{2} << 20;
  // Blocks from this size on are 2 MiB-aligned mappings of their own (huge pages), kept for reuse
  // when freed.
  static constexpr std::size_t k_large_bytes = 2 * k_huge_bytes;
  // Blocks from this size up to k_large_bytes are plain mappings in whole k_mid_grain, kept the
  // same way: a fuzz case's inputs, outputs and conversions are mostly 0.1 to 4 MiB, and glibc
  // hands blocks of that size back to the kernel when they are freed (mmap, or a trimmed heap
  // top), so every case faulted its pages in again (a third of an in-process layer_norm run).
  static constexpr std::size_t k_mid_bytes = std::size_t{128} << 10;
  static constexpr std::size_t k_mid_grain = std::size_t{64} << 10;
  // Mid-sized blocks kept stay resident (no MADV_FREE: see deallocate), at most this many bytes.
  static constexpr std::size_t k_mid_kept_bytes = std::size_t{64} << 20;
  // Kept large blocks are marked MADV_FREE beyond this many bytes of them; below it they stay
  // resident (reusing a MADV_FREE'd block faulted every page in again on this kind of VM).
  static constexpr std::size_t k_resident_bytes = std::size_t{256} << 20;

  // Keeps at most `cache_limit` bytes of freed large blocks (0: none, every one is unmapped).
  explicit RefHeap(std::size_t cache_limit) : m_limit(cache_limit) {}
  ~RefHeap();
  RefHeap(const RefHeap&) = delete;
  RefHeap& operator=(const RefHeap&) = delete;

  // `bytes` bytes aligned for any scalar (a large block: to 2 MiB); throws std::bad_alloc.
  void* allocate(std::size_t bytes);
  // Frees a block from allocate(bytes) with the same `bytes`.
  void deallocate(void* p, std::size_t bytes) noexcept;

  std::size_t cache_limit() const { return m_limit; }
  // Bytes of freed large blocks kept now, and how many blocks that is.
  std::size_t cached_bytes() const;
  std::size_t cached_blocks() const;
  // Unmaps every kept block.
  void release_cache() noexcept;

  // A debugging aid for uninit_output's contract: while set, every block allocate() returns
  // (small or large, fresh or reused) is first filled with this 8-byte pattern, so an element a
  // reference leaves unwritten reads as the pattern instead of as whatever was there. 0: off.
  void set_poison(std::uint64_t pattern) { m_poison.store(pattern, std::memory_order_relaxed); }

  // A kept block of `have` bytes serves a request of `need` (both rounded to their grain) when it
  // wastes at most a quarter of the request; a mid-sized request may take any kept block up to
  // k_large_bytes (a case's buffers live for one case, and sizes vary case to case: a tight fit
  // missed most of the time and mapped afresh).
  static bool fits(std::size_t have, std::size_t need) {
    if (need < k_large_bytes && have <= k_large_bytes) return have >= need;
    return have >= need && have - need <= need / 4;
  }

 private:
  struct Block {
    void* p = nullptr;
    std::size_t bytes = 0;  // the mapping's size, a multiple of k_mid_grain
  };
  void* allocate_block(std::size_t bytes);
  // The best-fitting kept block for `need` bytes (2 MiB-aligned when `aligned`), removed from the
  // cache; {} when none fits.
  Block take_cached(std::size_t need, bool aligned);

  const std::size_t m_limit;
  mutable std::mutex m_mu;
  std::unordered_map<void*, std::size_t> m_live;  // large blocks handed out: their mapping size
  std::vector<Block> m_cached;                    // kept blocks, least recently freed first
  std::size_t m_cached_bytes = 0;
  std::size_t m_cached_mid_bytes = 0;  // the part of m_cached_bytes in mid-sized blocks
  std::atomic<std::uint64_t> m_poison{0};
};

// The process's heap, which RefAllocator uses. Its cache limit is GPUEMU_REF_CACHE_MB (MiB;
// 0 turns the cache off) or, by default, 1 GiB or an eighth of physical memory, whichever is
// smaller. Never destroyed, so that an output freed during static destruction still finds it.
RefHeap& ref_heap();

}  // namespace gpuemu::detail
