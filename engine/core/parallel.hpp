// A minimal parallel-for over the machine's cores, for the fp64 reference loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace gpuemu {

inline unsigned worker_count() {
  static const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  return n;
}

// Calls fn(begin, end) over [0, n) split into contiguous chunks, one per core. Work smaller than
// `grain` items runs inline on the calling thread.
template <typename Fn>
void parallel_for(std::int64_t n, Fn&& fn, std::int64_t grain = 4096) {
  const auto workers = static_cast<std::int64_t>(worker_count());
  if (n <= grain || workers <= 1) {
    if (n > 0) fn(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks = std::min(workers, (n + grain - 1) / grain);
  const std::int64_t per = (n + chunks - 1) / chunks;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(chunks - 1));
  for (std::int64_t c = 1; c < chunks; ++c) {
    const std::int64_t b = c * per, e = std::min(n, b + per);
    if (b < e) threads.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(std::int64_t{0}, std::min(n, per));
  for (auto& t : threads) t.join();
}

}  // namespace gpuemu
