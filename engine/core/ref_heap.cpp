#include "core/ref_heap.hpp"

#include "gpuemu/engine/op.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace gpuemu::detail {
namespace {

std::size_t round_up(std::size_t bytes, std::size_t to) {
  return (bytes + to - 1) / to * to;
}

#ifdef __linux__
// A fresh mapping of `bytes` (a multiple of 2 MiB) at a 2 MiB boundary: mapped 2 MiB larger, the
// unaligned head and tail unmapped again. nullptr when the kernel refuses.
void* map_aligned(std::size_t bytes) {
  constexpr std::size_t huge = RefHeap::k_huge_bytes;
  void* raw =
      mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto b = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t a = round_up(b, huge);
  if (a > b) munmap(raw, a - b);
  if (const std::uintptr_t tail = b + bytes + huge - (a + bytes); tail > 0)
    munmap(reinterpret_cast<void*>(a + bytes), tail);
  void* p = reinterpret_cast<void*>(a);
  madvise(p, bytes, MADV_HUGEPAGE);  // advisory: no huge pages is only slower
  return p;
}
// A fresh mapping of `bytes` (a multiple of the page size); nullptr when the kernel refuses.
void* map_plain(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap(void* p, std::size_t bytes) noexcept {
  munmap(p, bytes);
}
// The pages of a kept block may be taken back by the kernel: under memory pressure they are
// dropped instead of swapped, and a dropped page is a zero page at the next write.
void lazy_free(void* p, std::size_t bytes) noexcept {
#ifdef MADV_FREE
  madvise(p, bytes, MADV_FREE);
#else
  (void)p;
  (void)bytes;
#endif
}
#else
void* map_aligned(std::size_t bytes) {
  return ::operator new (bytes, std::align_val_t{RefHeap::k_huge_bytes}, std::nothrow);
}
void* map_plain(std::size_t bytes) {
  return map_aligned(bytes);
}
void unmap(void* p, std::size_t) noexcept {
  ::operator delete (p, std::align_val_t{RefHeap::k_huge_bytes});
}
void lazy_free(void*, std::size_t) noexcept {}
#endif

std::size_t default_cache_limit() {
  constexpr std::size_t mib = std::size_t{1} << 20;
  if (const char* env = std::getenv("GPUEMU_REF_CACHE_MB"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    if (end != nullptr && *end == '\0' && *env != '-' && mb <= (std::size_t{1} << 30))
      return static_cast<std::size_t>(mb) * mib;
    // The engine has no logger (the daemon, the CLI and the Python module each have their own):
    // one line on stderr, then the default.
    std::fprintf(stderr,
                 "gpuemu: GPUEMU_REF_CACHE_MB='%s' is not a number of MiB; using the default\n",
                 env);
  }
  std::size_t limit = std::size_t{1} << 30;
#ifdef __linux__
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0)
    limit = std::min(limit, static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 8);
#endif
  return limit / RefHeap::k_huge_bytes * RefHeap::k_huge_bytes;
}

}  // namespace

RefHeap::~RefHeap() {
  release_cache();
}

RefHeap::Block RefHeap::take_cached(std::size_t need, bool aligned) {
  std::lock_guard lock(m_mu);
  auto best = m_cached.end();
  for (auto it = m_cached.begin(); it != m_cached.end(); ++it)
    if (fits(it->bytes, need) &&
        (!aligned || reinterpret_cast<std::uintptr_t>(it->p) % k_huge_bytes == 0) &&
        (best == m_cached.end() || it->bytes < best->bytes))
      best = it;
  if (best == m_cached.end()) return {};
  const Block b = *best;
  m_live.emplace(b.p, b.bytes);  // first: if it throws, the block stays kept
  m_cached.erase(best);
  m_cached_bytes -= b.bytes;
  if (b.bytes < k_large_bytes) m_cached_mid_bytes -= b.bytes;
  return b;
}

void* RefHeap::allocate(std::size_t bytes) {
  void* p = allocate_block(bytes);
  if (const std::uint64_t pattern = m_poison.load(std::memory_order_relaxed); pattern != 0) {
    auto* b = static_cast<unsigned char*>(p);
    for (std::size_t i = 0; i < bytes; i += sizeof pattern)
      std::memcpy(b + i, &pattern, std::min(sizeof pattern, bytes - i));
  }
  return p;
}

void* RefHeap::allocate_block(std::size_t bytes) {
  if (bytes < k_mid_bytes) return ::operator new(bytes);
  const bool large = bytes >= k_large_bytes;
  const std::size_t need = round_up(bytes, large ? k_huge_bytes : k_mid_grain);
  if (need < bytes) throw std::bad_alloc();  // wrapped around
  if (const Block b = take_cached(need, large); b.p != nullptr) return b.p;
  auto map = [large](std::size_t n) { return large ? map_aligned(n) : map_plain(n); };
  void* p = map(need);
  if (p == nullptr) {  // the kept blocks may be what is in the way
    release_cache();
    p = map(need);
    if (p == nullptr) throw std::bad_alloc();
  }
  try {
    std::lock_guard lock(m_mu);
    m_live.emplace(p, need);
  } catch (...) {
    unmap(p, need);
    throw;
  }
  return p;
}

void RefHeap::deallocate(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < k_mid_bytes) {
    ::operator delete(p);
    return;
  }
  std::lock_guard lock(m_mu);
  std::size_t size = round_up(bytes, bytes >= k_large_bytes ? k_huge_bytes : k_mid_grain);
  if (auto it = m_live.find(p); it != m_live.end()) {
    size = it->second;
    m_live.erase(it);
  }
  bool kept = false;
  // A large block's pages are marked MADV_FREE (the kernel may take them back); a mid-sized one
  // stays resident, up to k_mid_kept_bytes of them: on this kind of VM every page of a MADV_FREE'd
  // block faulted again when it was reused (a float32 softmax fuzz run in process: 1.48 s with
  // them marked, 0.86 s kept resident, 1.77 s without the mid-sized cache).
  const bool mid = size < k_large_bytes;
  if (size <= m_limit && (!mid || m_cached_mid_bytes + size <= std::min(m_limit, k_mid_kept_bytes))) {
    // Marked before it is in the cache: once there, another thread may take it and write it. The
    // first k_resident_bytes of kept large blocks stay resident as the mid-sized ones do.
    if (!mid && m_cached_bytes - m_cached_mid_bytes + size > k_resident_bytes) lazy_free(p, size);
    try {
      m_cached.push_back({p, size});
      m_cached_bytes += size;
      if (mid) m_cached_mid_bytes += size;
      kept = true;
    } catch (const std::bad_alloc&) {  // no memory for the bookkeeping: unmapped below
    }
  }
  if (!kept) unmap(p, size);
  // Over the limit: the least recently freed go.
  std::size_t drop = 0;
  while (m_cached_bytes > m_limit) {
    unmap(m_cached[drop].p, m_cached[drop].bytes);
    m_cached_bytes -= m_cached[drop].bytes;
    if (m_cached[drop].bytes < k_large_bytes) m_cached_mid_bytes -= m_cached[drop].bytes;
    ++drop;
  }
  m_cached.erase(m_cached.begin(), m_cached.begin() + static_cast<std::ptrdiff_t>(drop));
}

std::size_t RefHeap::cached_bytes() const {
  std::lock_guard lock(m_mu);
  return m_cached_bytes;
}

std::size_t RefHeap::cached_blocks() const {
  std::lock_guard lock(m_mu);
  return m_cached.size();
}

void RefHeap::release_cache() noexcept {
  std::vector<Block> all;
  {
    std::lock_guard lock(m_mu);
    all.swap(m_cached);
    m_cached_bytes = 0;
    m_cached_mid_bytes = 0;
  }
  for (const Block& b : all) unmap(b.p, b.bytes);
}

RefHeap& ref_heap() {
  static RefHeap* heap = new RefHeap(default_cache_limit());
  return *heap;
}

void* ref_allocate(std::size_t bytes) {
  return ref_heap().allocate(bytes);
}

void ref_deallocate(void* p, std::size_t bytes) noexcept {
  ref_heap().deallocate(p, bytes);
}

void ref_release_cache() noexcept {
  ref_heap().release_cache();
}

}  // namespace gpuemu::detail
