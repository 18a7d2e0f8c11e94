// The failure store: LMDB under $GPUEMU_HOME/store, owned by the daemon (one writer process; the
// daemon's threads share one Store). Named databases:
//   meta          store version, creation time
//   failures      id -> record (JSON metadata + zstd-compressed exact input bytes)
//   failures_idx  "<op>\0<created_ms big-endian>\0<id>" -> id   (list by op and time)
//   calibrations  "<op>/<dtype>" -> JSON
//   baselines     name -> JSON (lint artifact baselines)
//   runs          "<started_ms big-endian><id>" -> JSON (run history)
//   outbox        "<queued_ms big-endian><kind><id>" -> JSON (what a pushing daemon has still to
//                 hand to its central daemon: docs/scale.md)
// Every write is one durable transaction (MDB default sync); the map grows when full.
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/op_schema.hpp"  // Json

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu {

inline constexpr int k_store_version = 1;

struct FailureRecord {
  // assigned by put_failure when empty: "f" + 16 hex digits derived from the content (op, meta,
  // input bytes), so the same failure stored twice, or pushed twice, is one record
  std::string id;
  std::string op;
  std::int64_t created_ms = 0;    // unix ms; put_failure sets it when 0
  Json meta = Json::object();     // everything else: seed, dtype, dims, attrs, layouts, verdict,
                                  // diagnosis, kernel identity, versions (docs/protocol.md)
  std::vector<std::byte> inputs;  // the exact input bytes (stored compressed; returned raw)
};

// What `list` returns: the record without its input bytes.
struct FailureSummary {
  std::string id;
  std::string op;
  std::int64_t created_ms = 0;
  Json meta = Json::object();
  std::size_t input_bytes = 0;  // uncompressed size
};

struct FailureQuery {
  std::string op;             // empty: every op
  std::int64_t since_ms = 0;  // created at or after
  std::size_t limit = 0;      // 0: no limit
};

struct StoreOptions {
  std::size_t initial_map_bytes = std::size_t{64} << 20;
  std::size_t max_map_bytes = std::size_t{64} << 30;  // growth stops here: storage_full
  // Every failure and run written is also queued in the outbox, in the same transaction (a daemon
  // that pushes to a central one: what it acknowledged is never lost to a crash).
  bool outbox = false;
};

// One entry of the outbox: a failure ('f') or a run ('r') to push.
struct OutboxItem {
  std::string key;  // the entry's key (outbox_done, outbox_reject)
  char kind = 'f';
  std::string id;
  std::int64_t queued_ms = 0;
  std::int64_t started_ms = 0;  // a run's (its key in `runs`)
  std::string rejected;         // non-empty: refused for good by the receiver, not retried
};

struct OutboxStats {
  std::size_t pending = 0, rejected = 0;
  std::int64_t oldest_ms = 0;  // queued_ms of the oldest pending entry (0: none)
};

struct StoreStats {
  std::size_t failures = 0, calibrations = 0, baselines = 0, runs = 0, outbox = 0;
  std::size_t map_bytes = 0, used_bytes = 0;
  int version = k_store_version;
};

class Store {
 public:
  // Opens (creating) the store in `dir`. A store written by another store version is refused with
  // a clear error (never rewritten).
  static Result<std::unique_ptr<Store>> open(const std::string& dir, StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Durable on return. Never overwrites: a caller's id already present is a `conflict`; a record
  // without an id whose content is already stored returns the stored record's id (nothing new).
  Result<std::string> put_failure(FailureRecord record);
  // Several in one transaction (a run's failures): all or none.
  Result<std::vector<std::string>> put_failures(std::vector<FailureRecord> records);
  Result<FailureRecord> get_failure(const std::string& id) const;  // not_found
  Result<std::vector<FailureSummary>> list_failures(
      const FailureQuery& query) const;          // newest first
  Status delete_failure(const std::string& id);  // not_found

  Status put_calibration(const std::string& op, const std::string& dtype, const Json& value);
  Result<std::optional<Json>> get_calibration(const std::string& op,
                                              const std::string& dtype) const;
  Result<std::vector<Json>> list_calibrations() const;  // each value with "op" and "dtype" added

  Status put_baseline(const std::string& name, const Json& value);
  Result<std::optional<Json>> get_baseline(const std::string& name) const;
  Result<std::vector<std::string>> list_baselines() const;
  Status delete_baseline(const std::string& name);  // not_found

  Result<std::string> put_run(Json run);  // adds "id" and "started_ms" when absent
  Result<std::vector<Json>> list_runs(std::size_t limit) const;  // newest first
  Result<std::optional<Json>> get_run(std::int64_t started_ms, const std::string& id) const;
  // A run written elsewhere (with its id and started_ms): true when stored, false when the same run
  // is already here; the same id with other content is a `conflict`. Keys in `ignore` (e.g. where
  // it was pushed from) do not count as content.
  Result<bool> import_run(const Json& run, const std::vector<std::string>& ignore = {});

  // The outbox (StoreOptions::outbox). Pending entries, oldest first, at most `max`.
  Result<std::vector<OutboxItem>> outbox_peek(std::size_t max) const;
  Status outbox_done(const std::vector<std::string>& keys);  // pushed: removed
  Status outbox_reject(const std::string& key, const std::string& why);  // kept, not retried
  Result<std::size_t> outbox_retry_rejected();  // rejected entries become pending again
  Result<OutboxStats> outbox_stats() const;
  Result<std::vector<OutboxItem>> outbox_rejected(std::size_t max) const;
  // Queues stored failures matching `query` (and, with `runs`, every stored run) that are not
  // queued already: what was stored before pushing was turned on. Returns how many were queued.
  Result<std::size_t> outbox_enqueue_stored(const FailureQuery& query, bool runs);

  Result<StoreStats> stats() const;
  // How many writes of failures (put, delete) and runs this Store committed since it was opened:
  // a watcher that sees it change lists again (the daemon's `ping` reports it as `changes`).
  std::uint64_t changes() const;
  const std::string& dir() const;

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace gpuemu
