// The Store: opening (directory, version check, named databases), map growth, and failure records.
// Calibrations, baselines, runs and stats are in store_tables.cpp; the byte layouts in
// store_codec.hpp; the design in docs/store.md.
#include "gpuemu/store/store.hpp"

#include "store_impl.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <tuple>

namespace gpuemu {

namespace fs = std::filesystem;
using store_codec::check_name;

namespace {

inline constexpr unsigned k_max_dbs = 8;  // seven named databases, and room for one more
inline constexpr int k_id_attempts = 16;  // ids tried for a record before giving up

// A stored version string as it may appear in a message.
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 40)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

Status create_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      return make_error(ErrorCode::io_error,
                        "cannot create store directory " + dir + ": " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec)
      return make_error(ErrorCode::io_error,
                        "cannot set mode 0700 on " + dir + ": " + ec.message());
  }
  if (!fs::is_directory(dir, ec))
    return make_error(ErrorCode::io_error, "store path " + dir + " is not a directory");
  return {};
}

}  // namespace

// Opens (creating) the named databases; checks or writes the store version.
Status Store::Impl::initialise() {
  Impl& impl = *this;
  return impl.write([&](lmdb::Txn& txn) -> Status {
    GPUEMU_TRY(impl.meta, txn.open_dbi("meta", MDB_CREATE));
    GPUEMU_TRY(auto version, txn.get(impl.meta, "version"));
    const std::string ours = std::to_string(k_store_version);
    if (version && *version != ours)
      return make_error(ErrorCode::conflict,
                        "the store at " + impl.dir + " has version " + printable(*version) +
                            " but this gpuemu reads store version " + ours +
                            " only; it was left untouched (use a matching gpuemu, or move the "
                            "directory aside to start a new store)");
    if (!version) {
      GPUEMU_TRY_STATUS(txn.put(impl.meta, "version", ours));
      GPUEMU_TRY_STATUS(txn.put(impl.meta, "created_ms", std::to_string(store_codec::now_ms())));
    }
    GPUEMU_TRY(impl.failures, txn.open_dbi("failures", MDB_CREATE));
    GPUEMU_TRY(impl.failures_idx, txn.open_dbi("failures_idx", MDB_CREATE));
    GPUEMU_TRY(impl.calibrations, txn.open_dbi("calibrations", MDB_CREATE));
    GPUEMU_TRY(impl.baselines, txn.open_dbi("baselines", MDB_CREATE));
    GPUEMU_TRY(impl.runs, txn.open_dbi("runs", MDB_CREATE));
    GPUEMU_TRY(impl.outbox, txn.open_dbi("outbox", MDB_CREATE));
    return {};
  });
}

namespace {

Error failure_not_found(const std::string& id, const std::string& dir) {
  return make_error(ErrorCode::not_found, "no failure " + id + " in the store at " + dir);
}

}  // namespace

// ---- opening and the map ---------------------------------------------------------------------

Store::Store(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Store::~Store() = default;

const std::string& Store::dir() const {
  return m_impl->dir;
}

Result<std::unique_ptr<Store>> Store::open(const std::string& dir, StoreOptions options) {
  return Impl::guard([&]() -> Result<std::unique_ptr<Store>> {
    if (dir.empty()) return make_error(ErrorCode::invalid_argument, "store directory is empty");
    if (options.max_map_bytes == 0)
      return make_error(ErrorCode::invalid_argument, "max_map_bytes is 0");
    options.initial_map_bytes =
        std::min(std::max(options.initial_map_bytes, std::size_t{32} << 10), options.max_map_bytes);
    GPUEMU_TRY_STATUS(create_dir(dir));

    // A reopened store keeps at least the size its file already has (LMDB would otherwise shrink
    // the map to the used pages and the first write would have to grow it again).
    std::size_t map_bytes = options.initial_map_bytes;
    std::error_code ec;
    if (const auto file = fs::file_size(fs::path(dir) / "data.mdb", ec); !ec)
      map_bytes = std::max<std::size_t>(map_bytes, static_cast<std::size_t>(file));

    auto impl = std::make_unique<Impl>();
    impl->dir = dir;
    impl->options = options;
    GPUEMU_TRY(impl->env, lmdb::Env::open(dir, {MDB_NOTLS, k_max_dbs, map_bytes}));
    impl->env.clear_stale_readers();  // slots of processes killed while reading
    GPUEMU_TRY_STATUS(impl->initialise());
    return std::unique_ptr<Store>(new Store(std::move(impl)));
  });
}

Status Store::Impl::grow_map() {
  std::unique_lock<store_detail::MapGate> lock(gate);
  const std::size_t current = env.map_size();
  if (current >= options.max_map_bytes)
    return make_error(ErrorCode::storage_full,
                      "the store at " + dir + " is full: its map is " + std::to_string(current) +
                          " bytes and max_map_bytes is " + std::to_string(options.max_map_bytes));
  const std::size_t next =
      current > options.max_map_bytes / 2 ? options.max_map_bytes : current * 2;
  return env.set_map_size(next);
}

Status Store::Impl::adopt_map_size() {
  std::unique_lock<store_detail::MapGate> lock(gate);
  return env.set_map_size(0);
}

// ---- failures --------------------------------------------------------------------------------

Result<std::string> Store::put_failure(FailureRecord record) {
  std::vector<FailureRecord> one;
  one.push_back(std::move(record));
  GPUEMU_TRY(auto ids, put_failures(std::move(one)));
  return std::move(ids.front());
}

Result<std::vector<std::string>> Store::put_failures(std::vector<FailureRecord> records) {
  return Impl::guard([&]() -> Result<std::vector<std::string>> {
    // Validate and compress before taking the write lock.
    std::vector<std::string> values;
    values.reserve(records.size());
    const std::int64_t now = store_codec::now_ms();
    for (FailureRecord& record : records) {
      GPUEMU_TRY_STATUS(check_name("failure op", record.op));
      if (!record.id.empty()) GPUEMU_TRY_STATUS(check_name("failure id", record.id));
      if (record.created_ms < 0)
        return make_error(ErrorCode::invalid_argument, "failure created_ms is negative");
      if (record.created_ms == 0) record.created_ms = now;
      GPUEMU_TRY(std::string value, store_codec::encode_failure(record));
      values.push_back(std::move(value));
    }
    Impl& impl = *m_impl;
    auto written = impl.write([&](lmdb::Txn& txn) -> Result<std::vector<std::string>> {
      std::vector<std::string> ids;  // rebuilt on every attempt (growth retries the txn)
      for (std::size_t i = 0; i < records.size(); ++i) {
        std::string id = records[i].id;
        if (id.empty()) {
          // The content's id; when it is taken, by the same content nothing is written (the
          // record is there), by other content the next id is tried.
          bool present = false;
          for (int attempt = 0;; ++attempt) {
            if (attempt == k_id_attempts)
              return make_error(ErrorCode::internal, "could not find an unused failure id");
            id = store_codec::content_failure_id(records[i], attempt);
            GPUEMU_TRY(bool inserted, txn.put(impl.failures, id, values[i], MDB_NOOVERWRITE));
            if (inserted) break;
            GPUEMU_TRY(auto held, txn.get(impl.failures, id));
            if (!held) continue;
            GPUEMU_TRY(FailureRecord other, store_codec::decode_failure(id, *held));
            if (other.op == records[i].op && other.meta == records[i].meta &&
                other.inputs == records[i].inputs) {
              present = true;
              break;
            }
          }
          if (present) {
            ids.push_back(std::move(id));
            continue;
          }
        } else {
          GPUEMU_TRY(bool inserted, txn.put(impl.failures, id, values[i], MDB_NOOVERWRITE));
          if (!inserted)
            return make_error(ErrorCode::conflict,
                              "failure " + id + " already exists in the store at " + impl.dir);
        }
        const std::string key =
            store_codec::failure_index_key(records[i].op, records[i].created_ms, id);
        GPUEMU_TRY_STATUS(txn.put(impl.failures_idx, key, id));
        if (impl.options.outbox)
          GPUEMU_TRY_STATUS(txn.put(impl.outbox, store_codec::outbox_key(now, 'f', id), "{}"));
        ids.push_back(std::move(id));
      }
      return ids;
    });
    if (written && !records.empty()) ++impl.changes;
    return written;
  });
}

Result<FailureRecord> Store::get_failure(const std::string& id) const {
  return m_impl->read([&](const lmdb::Txn& txn) -> Result<FailureRecord> {
    GPUEMU_TRY(auto value, txn.get(m_impl->failures, id));
    if (!value) return failure_not_found(id, m_impl->dir);
    return store_codec::decode_failure(id, *value);
  });
}

Result<std::vector<FailureSummary>> Store::list_failures(const FailureQuery& query) const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::vector<FailureSummary>> {
    struct Hit {
      std::int64_t created_ms;
      std::string id;
    };
    std::vector<Hit> hits;
    GPUEMU_TRY(lmdb::Cursor cursor, txn.cursor(impl.failures_idx));
    auto index_key = [&](std::string_view key) -> Result<store_codec::FailureIndexKey> {
      auto parsed = store_codec::parse_failure_index_key(key);
      if (!parsed)
        return make_error(ErrorCode::io_error,
                          "store corrupted: malformed failures_idx key in " + impl.dir);
      return *parsed;
    };
    if (!query.op.empty()) {
      // Keys of `op` are op\0<time>\0<id>: start just past them (op\1) and walk back in time.
      const std::string prefix = store_codec::failure_index_prefix(query.op);
      std::string past = query.op;
      past.push_back('\1');
      GPUEMU_TRY(bool at, cursor.seek(past));
      if (at) {
        GPUEMU_TRY(at, cursor.move(MDB_PREV));
      } else {
        GPUEMU_TRY(at, cursor.move(MDB_LAST));
      }
      for (; at && cursor.key().starts_with(prefix);) {
        GPUEMU_TRY(auto key, index_key(cursor.key()));
        if (key.created_ms < query.since_ms) break;
        hits.push_back({key.created_ms, std::string(key.id)});
        if (query.limit != 0 && hits.size() == query.limit) break;
        GPUEMU_TRY(at, cursor.move(MDB_PREV));
      }
    } else {
      // Every op: the index is ordered by op first, so gather and sort by time.
      GPUEMU_TRY(bool at, cursor.move(MDB_FIRST));
      for (; at;) {
        GPUEMU_TRY(auto key, index_key(cursor.key()));
        if (key.created_ms >= query.since_ms) hits.push_back({key.created_ms, std::string(key.id)});
        GPUEMU_TRY(at, cursor.move(MDB_NEXT));
      }
      std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
        return std::tie(a.created_ms, a.id) > std::tie(b.created_ms, b.id);
      });
      if (query.limit != 0 && hits.size() > query.limit) hits.resize(query.limit);
    }
    std::vector<FailureSummary> out;
    out.reserve(hits.size());
    for (const Hit& hit : hits) {
      GPUEMU_TRY(auto value, txn.get(impl.failures, hit.id));
      if (!value)
        return make_error(ErrorCode::io_error, "store corrupted: failures_idx names " + hit.id +
                                                   ", which is missing, in " + impl.dir);
      GPUEMU_TRY(FailureSummary summary, store_codec::decode_failure_summary(hit.id, *value));
      out.push_back(std::move(summary));
    }
    return out;
  });
}

Status Store::delete_failure(const std::string& id) {
  Impl& impl = *m_impl;
  Status done = impl.write([&](lmdb::Txn& txn) -> Status {
    GPUEMU_TRY(auto value, txn.get(impl.failures, id));
    if (!value) return failure_not_found(id, impl.dir);
    GPUEMU_TRY(FailureSummary summary, store_codec::decode_failure_summary(id, *value));
    const std::string key = store_codec::failure_index_key(summary.op, summary.created_ms, id);
    GPUEMU_TRY_STATUS(txn.del(impl.failures_idx, key));
    GPUEMU_TRY_STATUS(txn.del(impl.failures, id));
    return {};
  });
  if (done) ++impl.changes;
  return done;
}

std::uint64_t Store::changes() const { return m_impl->changes.load(); }

}  // namespace gpuemu
