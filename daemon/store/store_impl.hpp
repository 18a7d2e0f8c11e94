// Store::Impl: the open environment, its database handles and the two locks every operation goes
// through. Shared by store.cpp (open, failures) and store_tables.cpp (calibrations, baselines,
// runs, stats). Internal to gpuemu_store.
//
// Concurrency: LMDB allows one write transaction at a time, so writes are serialised by
// `write_mutex` (held across map growth and retries). The environment is opened with MDB_NOTLS, so
// a read transaction is not tied to the thread that began it and any number of daemon threads read
// in parallel with the writer. Every transaction also holds `gate` shared; growing the map takes it
// exclusively, because mdb_env_set_mapsize must run with no transaction of this process active.
#pragma once

#include "gpuemu/store/store.hpp"
#include "lmdb_handle.hpp"
#include "map_gate.hpp"
#include "store_codec.hpp"

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

namespace gpuemu {

struct Store::Impl {
  std::string dir;
  StoreOptions options;
  lmdb::Env env;
  lmdb::Dbi meta, failures, failures_idx, calibrations, baselines, runs, outbox;
  mutable store_detail::MapGate gate;
  std::mutex write_mutex;
  store_codec::IdGenerator ids;  // drawn from only under write_mutex
  std::atomic<std::uint64_t> changes{0};  // committed writes of failures and runs (changes())

  // Runs `body` (a callable returning Result<T> or Status) and turns any exception it lets out
  // into ErrorCode::internal: nothing throws across the Store's API.
  template <typename F>
  static auto guard(F&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const std::exception& e) {
      return make_error(ErrorCode::internal, std::string("store: ") + e.what());
    }
  }

  // Runs body(const lmdb::Txn&) in a read transaction.
  template <typename F>
  auto read(F&& body) const -> decltype(body(std::declval<const lmdb::Txn&>())) {
    return guard([&]() -> decltype(body(std::declval<const lmdb::Txn&>())) {
      for (int attempt = 0;; ++attempt) {
        {
          std::shared_lock<store_detail::MapGate> lock(gate);
          int rc = 0;
          auto txn = lmdb::Txn::begin(env, /*read_only=*/true, &rc);
          if (txn) return body(*txn);
          if (rc != MDB_MAP_RESIZED || attempt >= 3) return txn.error();
        }
        GPUEMU_TRY_STATUS(const_cast<Impl*>(this)->adopt_map_size());
      }
    });
  }

  // Runs body(lmdb::Txn&) in a write transaction and commits it when body succeeds. When the map
  // fills, aborts, grows the map (doubling, up to options.max_map_bytes) and runs body again from
  // the start, so body must not keep state from an earlier attempt.
  template <typename F>
  auto write(F&& body) -> decltype(body(std::declval<lmdb::Txn&>())) {
    using R = decltype(body(std::declval<lmdb::Txn&>()));
    return guard([&]() -> R {
      std::lock_guard<std::mutex> writer(write_mutex);
      for (int resizes = 0;;) {
        bool adopt = false;  // another process grew the map: take its size, do not double
        {
          std::shared_lock<store_detail::MapGate> lock(gate);
          int rc = 0;
          auto txn = lmdb::Txn::begin(env, /*read_only=*/false, &rc);
          if (!txn) {
            if (rc != MDB_MAP_RESIZED || ++resizes > 3) return txn.error();
            adopt = true;
          } else {
            R result = body(*txn);
            if (result) {
              Status committed = txn->commit();
              if (committed) return result;
              if (!txn->map_full()) return committed.error();
            } else if (!txn->map_full()) {
              return result;
            }
          }
        }  // the transaction is aborted (unless committed) before the gate is released
        if (adopt) {
          GPUEMU_TRY_STATUS(adopt_map_size());
        } else {
          GPUEMU_TRY_STATUS(grow_map());
        }
      }
    });
  }

  // Opens (creating) the named databases; checks the store version, or writes it into a new store.
  Status initialise();
  // Doubles the map size (capped at options.max_map_bytes); storage_full once at the cap.
  Status grow_map();
  // After MDB_MAP_RESIZED (another process grew the map): adopt its size.
  Status adopt_map_size();
};

}  // namespace gpuemu
