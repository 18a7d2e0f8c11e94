// Shared-memory hand-off of large tensors (docs/protocol.md, "Shared memory").
//
// Every segment is a sealed memfd that a *client* creates and owns: an arena, mapped once and kept
// for the connection's life (a pool, so no request faults fresh pages in). The daemon creates no
// segment: it opens a client's arena through /proc/<peer pid>/fd/<fd> (the peer pid is the one the
// kernel reports for the socket's pipe, never the message's word), checks it (a memfd named
// "gpuemu-shm", sealed against shrinking, exactly the size the descriptor claims), maps it and keeps
// that mapping until the pipe closes. The client writes a request's large tensors into one arena
// and offers another for the reply's; the daemon reads a request's floating-point tensors where
// they lie (it copies integer ones, and whatever it keeps past the request, before it replies)
// and writes reply tensors into the offered arena. An arena goes back to the client's pool only
// once its request has been answered.
//
// Lifetime: a memfd has no name in any file system; the kernel frees it when its last descriptor
// and mapping go. A client that dies closes its descriptors, and the daemon drops its mappings
// when the pipe closes (and, each time a pipe comes or goes, those of any peer no longer alive),
// so neither side's crash leaves memory behind. The seals (F_SEAL_SHRINK | F_SEAL_GROW |
// F_SEAL_SEAL) make a mapping that is shorter than its file impossible: no SIGBUS.
#pragma once

#include "gpuemu/base/error.hpp"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace gpuemu::shm {

inline constexpr const char* k_name_prefix = "gpuemu-shm";  // the memfd's name: the namespace
inline constexpr std::size_t k_default_min_bytes = std::size_t{64} << 10;  // smaller stays inline
inline constexpr std::size_t k_min_arena_bytes = std::size_t{1} << 20;

// Where a tensor's bytes lie: an arena (its owner's pid and descriptor number, its size) and the
// byte offset inside it. On the wire: {"pid", "fd", "size", "offset"} (docs/protocol.md).
struct SegmentRef {
  std::int64_t pid = 0;
  std::int64_t fd = -1;
  std::uint64_t size = 0;
  std::uint64_t offset = 0;
};

// An arena this process created: a sealed memfd, mapped read-write, its pages faulted in once.
class Arena {
 public:
  static Result<std::shared_ptr<Arena>> create(std::size_t size);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* data() const { return m_data; }
  std::size_t size() const { return m_size; }
  int fd() const { return m_fd; }

 private:
  Arena() = default;
  int m_fd = -1;
  std::byte* m_data = nullptr;
  std::size_t m_size = 0;
};

// A client's arenas, reused across requests. An arena is free when nothing but the pool holds it
// (a request in flight, or a Python array over reply bytes, holds a shared_ptr). Thread-safe.
class ArenaPool {
 public:
  // `limit_bytes`: the most the pool keeps mapped; past it free arenas are dropped first, and a
  // request that still does not fit goes inline (acquire returns nullptr).
  explicit ArenaPool(std::size_t limit_bytes) : m_limit(limit_bytes) {}
  std::shared_ptr<Arena> acquire(std::size_t min_bytes);
  // Takes `arena` out of the pool for good (a request that got no reply: its peer may still use
  // it); it is unmapped and closed when its last holder lets it go.
  void retire(const std::shared_ptr<Arena>& arena);
  void retire_fd(int fd);
  std::size_t mapped_bytes() const;
  std::size_t arenas() const;

 private:
  mutable std::mutex m_mu;
  std::vector<std::shared_ptr<Arena>> m_arenas;
  std::size_t m_limit;
};

// A client's arena as the daemon maps it. Read-write: reply tensors are written into it.
struct Mapping {
  std::byte* data = nullptr;
  std::size_t size = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  ~Mapping();
};

// The daemon's mappings of one peer's arenas (one per pipe). Opening is checked step by step; each
// refusal is a protocol_error saying which rule the descriptor broke.
class PeerMappings {
 public:
  explicit PeerMappings(std::int64_t peer_pid) : m_pid(peer_pid) {}
  // The mapped arena `ref` names, when `ref.offset + nbytes` lies inside it.
  Result<std::shared_ptr<Mapping>> map(const SegmentRef& ref, std::size_t nbytes);
  std::int64_t pid() const { return m_pid; }
  std::size_t mapped_bytes() const;
  std::size_t mappings() const;

 private:
  std::int64_t m_pid;
  mutable std::mutex m_mu;
  std::map<std::int64_t, std::shared_ptr<Mapping>> m_by_fd;  // by the peer's descriptor number
};

// The client's settings, from the environment: GPUEMU_SHM=0 turns the hand-off off,
// GPUEMU_SHM_MIN_BYTES sets the threshold (a tensor's storage of at least that many bytes travels
// in shared memory), GPUEMU_SHM_POOL_MB bounds the arenas one connection keeps mapped.
struct ClientSettings {
  bool enabled = true;
  std::size_t min_bytes = k_default_min_bytes;
  std::size_t pool_bytes = std::size_t{2048} << 20;
  static ClientSettings from_environment();
};

// The smallest power of two >= n (and >= k_min_arena_bytes).
std::size_t arena_size_for(std::size_t n);

}  // namespace gpuemu::shm
