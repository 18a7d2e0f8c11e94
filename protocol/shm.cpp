// Shared-memory arenas and the daemon's checked mappings of them (gpuemu/protocol/shm.hpp).
#include "gpuemu/protocol/shm.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gpuemu::shm {
namespace {

Error shm_error(std::string message) {
  return make_error(ErrorCode::protocol_error, "shared-memory tensor: " + std::move(message));
}

std::string errno_text() { return std::strerror(errno); }

constexpr std::size_t k_max_mappings_per_peer = 32;

}  // namespace

std::size_t arena_size_for(std::size_t n) {
  std::size_t s = k_min_arena_bytes;
  while (s < n) s <<= 1;
  return s;
}

Result<std::shared_ptr<Arena>> Arena::create(std::size_t size) {
  std::shared_ptr<Arena> a(new Arena());
  a->m_fd = ::memfd_create(k_name_prefix, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (a->m_fd < 0) return make_error(ErrorCode::io_error, "memfd_create: " + errno_text());
  if (::ftruncate(a->m_fd, static_cast<off_t>(size)) != 0)
    return make_error(ErrorCode::io_error, "sizing a shared-memory arena: " + errno_text());
  // Sealed: the daemon may map it without fearing that it shrinks under its mapping.
  if (::fcntl(a->m_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return make_error(ErrorCode::io_error, "sealing a shared-memory arena: " + errno_text());
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, a->m_fd, 0);
  if (p == MAP_FAILED) return make_error(ErrorCode::io_error, "mapping an arena: " + errno_text());
  a->m_data = static_cast<std::byte*>(p);
  a->m_size = size;
  return a;
}

Arena::~Arena() {
  if (m_data) ::munmap(m_data, m_size);
  if (m_fd >= 0) ::close(m_fd);
}

std::shared_ptr<Arena> ArenaPool::acquire(std::size_t min_bytes) {
  std::lock_guard lock(m_mu);
  std::shared_ptr<Arena> best;
  for (const auto& a : m_arenas)
    if (a.use_count() == 1 && a->size() >= min_bytes && (!best || a->size() < best->size()))
      best = a;
  if (best) return best;
  const std::size_t size = arena_size_for(min_bytes);
  std::size_t total = 0;
  for (const auto& a : m_arenas) total += a->size();
  // Over the bound: free arenas go first (the smallest, which did not fit), then inline.
  while (total + size > m_limit) {
    auto it = std::find_if(m_arenas.begin(), m_arenas.end(),
                           [](const auto& a) { return a.use_count() == 1; });
    if (it == m_arenas.end()) return nullptr;
    total -= (*it)->size();
    m_arenas.erase(it);
  }
  auto created = Arena::create(size);
  if (!created) return nullptr;  // no memfd here: the tensors go inline
  m_arenas.push_back(*created);
  return *created;
}

void ArenaPool::retire(const std::shared_ptr<Arena>& arena) {
  std::lock_guard lock(m_mu);
  std::erase(m_arenas, arena);
}

void ArenaPool::retire_fd(int fd) {
  std::lock_guard lock(m_mu);
  std::erase_if(m_arenas, [fd](const auto& a) { return a->fd() == fd; });
}

std::size_t ArenaPool::mapped_bytes() const {
  std::lock_guard lock(m_mu);
  std::size_t n = 0;
  for (const auto& a : m_arenas) n += a->size();
  return n;
}

std::size_t ArenaPool::arenas() const {
  std::lock_guard lock(m_mu);
  return m_arenas.size();
}

Mapping::~Mapping() {
  if (data) ::munmap(data, size);
}

Result<std::shared_ptr<Mapping>> PeerMappings::map(const SegmentRef& ref, std::size_t nbytes) {
  if (ref.pid != m_pid)
    return shm_error("the segment's owner pid " + std::to_string(ref.pid) +
                     " is not this connection's peer (pid " + std::to_string(m_pid) + ")");
  if (ref.fd < 0 || ref.fd > (std::int64_t{1} << 24))
    return shm_error("fd " + std::to_string(ref.fd) + " is not a descriptor number");
  if (ref.offset > ref.size || nbytes > ref.size - ref.offset)
    return shm_error("bytes [" + std::to_string(ref.offset) + ", " +
                     std::to_string(ref.offset + nbytes) + ") run past the segment's " +
                     std::to_string(ref.size) + " bytes");
  const std::string path = "/proc/" + std::to_string(m_pid) + "/fd/" + std::to_string(ref.fd);
  char link[256] = {};
  const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  if (n < 0)
    return shm_error("the peer has no open segment at fd " + std::to_string(ref.fd) + " (" +
                     errno_text() + ")");
  const std::string target(link, static_cast<std::size_t>(n));
  if (target.rfind(std::string("/memfd:") + k_name_prefix, 0) != 0)
    return shm_error("fd " + std::to_string(ref.fd) + " is '" + target +
                     "', outside gpuemu's segments (memfds named " + k_name_prefix + ")");
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return shm_error("cannot open the peer's segment at fd " + std::to_string(ref.fd) + " (" +
                     errno_text() + ")");
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return shm_error("fstat: " + errno_text());
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return shm_error("the segment at fd " + std::to_string(ref.fd) +
                     " is not sealed against shrinking (F_SEAL_SHRINK)");
  if (!S_ISREG(st.st_mode) || st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) != ref.size)
    return shm_error("the descriptor claims a segment of " + std::to_string(ref.size) +
                     " bytes, the segment has " + std::to_string(st.st_size));
  std::lock_guard lock(m_mu);
  if (auto it = m_by_fd.find(ref.fd); it != m_by_fd.end()) {
    const Mapping& m = *it->second;
    if (m.dev == st.st_dev && m.ino == st.st_ino && m.size == ref.size) return it->second;
    m_by_fd.erase(it);  // that descriptor number now names another arena
  }
  if (ref.size == 0) return shm_error("the segment is empty");
  void* p = ::mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return shm_error("cannot map the segment: " + errno_text());
  auto m = std::make_shared<Mapping>();
  m->data = static_cast<std::byte*>(p);
  m->size = ref.size;
  m->dev = st.st_dev;
  m->ino = st.st_ino;
  if (m_by_fd.size() >= k_max_mappings_per_peer) m_by_fd.erase(m_by_fd.begin());
  m_by_fd.emplace(ref.fd, m);
  return m;
}

std::size_t PeerMappings::mapped_bytes() const {
  std::lock_guard lock(m_mu);
  std::size_t n = 0;
  for (const auto& [fd, m] : m_by_fd) n += m->size;
  return n;
}

std::size_t PeerMappings::mappings() const {
  std::lock_guard lock(m_mu);
  return m_by_fd.size();
}

ClientSettings ClientSettings::from_environment() {
  ClientSettings s;
  if (const char* v = std::getenv("GPUEMU_SHM"); v && (std::string(v) == "0" || std::string(v) == "off"))
    s.enabled = false;
  if (const char* v = std::getenv("GPUEMU_SHM_MIN_BYTES"); v && *v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end && *end == '\0') s.min_bytes = std::max<std::size_t>(1, n);
  }
  if (const char* v = std::getenv("GPUEMU_SHM_POOL_MB"); v && *v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end && *end == '\0') s.pool_bytes = static_cast<std::size_t>(n) << 20;
  }
  return s;
}

}  // namespace gpuemu::shm
