// The lock that lets the Store resize LMDB's map: every transaction (read or write) holds it
// shared; growing the map (mdb_env_set_mapsize, which requires that no transaction of this process
// is active) holds it exclusively.
//
// Why not std::shared_mutex: libstdc++ builds it on a pthread rwlock with glibc's default
// reader-preferring policy, so a steady stream of overlapping list/get calls could starve a
// writer waiting to grow the map forever. Here a pending exclusive request stops new shared
// entrants, so growth waits only for the transactions already running.
//
// Meets SharedLockable: use it with std::shared_lock and std::unique_lock. Not re-entrant: a
// thread holding it shared must not take it again (a pending grow would deadlock it).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace gpuemu::store_detail {

class MapGate {
 public:
  void lock_shared() {
    std::unique_lock<std::mutex> lock(m_mutex);
    m_changed.wait(lock, [&] { return !m_exclusive; });
    ++m_shared;
  }
  void unlock_shared() {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (--m_shared == 0) m_changed.notify_all();
  }
  void lock() {
    std::unique_lock<std::mutex> lock(m_mutex);
    m_changed.wait(lock, [&] { return !m_exclusive; });
    m_exclusive = true;  // from here no new shared holder enters
    m_changed.wait(lock, [&] { return m_shared == 0; });
  }
  void unlock() {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_exclusive = false;
    m_changed.notify_all();
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::size_t m_shared = 0;
  bool m_exclusive = false;
};

}  // namespace gpuemu::store_detail
