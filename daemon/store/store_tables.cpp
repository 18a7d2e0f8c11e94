// The Store's small JSON tables: calibrations, lint baselines, run history; and stats.
// Failure records and opening are in store.cpp.
#include "gpuemu/store/store.hpp"

#include "store_impl.hpp"

namespace gpuemu {

using store_codec::check_name;
using store_codec::dump_json;
using store_codec::parse_stored_json;

namespace {

Status check_dtype(const std::string& dtype) {
  GPUEMU_TRY_STATUS(check_name("calibration dtype", dtype));
  if (dtype.find('/') != std::string::npos)
    return make_error(ErrorCode::invalid_argument, "calibration dtype contains '/': " + dtype);
  return {};
}

}  // namespace

// ---- calibrations: "<op>/<dtype>" -> JSON ------------------------------------------------------

Status Store::put_calibration(const std::string& op, const std::string& dtype, const Json& value) {
  GPUEMU_TRY_STATUS(check_name("calibration op", op));
  GPUEMU_TRY_STATUS(check_dtype(dtype));
  if (!value.is_object())
    return make_error(ErrorCode::invalid_argument, "a calibration must be a JSON object");
  Impl& impl = *m_impl;
  return Impl::guard([&]() -> Status {
    const std::string text = dump_json(value);
    return impl.write([&](lmdb::Txn& txn) -> Status {
      GPUEMU_TRY_STATUS(txn.put(impl.calibrations, store_codec::calibration_key(op, dtype), text));
      return {};
    });
  });
}

Result<std::optional<Json>> Store::get_calibration(const std::string& op,
                                                   const std::string& dtype) const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::optional<Json>> {
    const std::string key = store_codec::calibration_key(op, dtype);
    GPUEMU_TRY(auto text, txn.get(impl.calibrations, key));
    if (!text) return std::optional<Json>();
    GPUEMU_TRY(Json value, parse_stored_json(*text, "calibration " + key));
    return std::optional<Json>(std::move(value));
  });
}

Result<std::vector<Json>> Store::list_calibrations() const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::vector<Json>> {
    std::vector<Json> out;
    GPUEMU_TRY(lmdb::Cursor cursor, txn.cursor(impl.calibrations));
    GPUEMU_TRY(bool at, cursor.move(MDB_FIRST));
    for (; at;) {
      const std::string key(cursor.key());
      GPUEMU_TRY(Json value, parse_stored_json(cursor.value(), "calibration " + key));
      const std::size_t slash = key.rfind('/');
      if (!value.is_object() || slash == std::string::npos)
        return make_error(ErrorCode::io_error, "store corrupted: calibration " + key + " in " +
                                                   impl.dir + " is not an op/dtype object");
      value["op"] = key.substr(0, slash);
      value["dtype"] = key.substr(slash + 1);
      out.push_back(std::move(value));
      GPUEMU_TRY(at, cursor.move(MDB_NEXT));
    }
    return out;
  });
}

// ---- baselines: name -> JSON -------------------------------------------------------------------

Status Store::put_baseline(const std::string& name, const Json& value) {
  GPUEMU_TRY_STATUS(check_name("baseline name", name));
  Impl& impl = *m_impl;
  return Impl::guard([&]() -> Status {
    const std::string text = dump_json(value);
    return impl.write([&](lmdb::Txn& txn) -> Status {
      GPUEMU_TRY_STATUS(txn.put(impl.baselines, name, text));
      return {};
    });
  });
}

Result<std::optional<Json>> Store::get_baseline(const std::string& name) const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::optional<Json>> {
    GPUEMU_TRY(auto text, txn.get(impl.baselines, name));
    if (!text) return std::optional<Json>();
    GPUEMU_TRY(Json value, parse_stored_json(*text, "baseline " + name));
    return std::optional<Json>(std::move(value));
  });
}

Result<std::vector<std::string>> Store::list_baselines() const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::vector<std::string>> {
    std::vector<std::string> names;
    GPUEMU_TRY(lmdb::Cursor cursor, txn.cursor(impl.baselines));
    GPUEMU_TRY(bool at, cursor.move(MDB_FIRST));
    for (; at;) {
      names.emplace_back(cursor.key());
      GPUEMU_TRY(at, cursor.move(MDB_NEXT));
    }
    return names;
  });
}

Status Store::delete_baseline(const std::string& name) {
  Impl& impl = *m_impl;
  return impl.write([&](lmdb::Txn& txn) -> Status {
    GPUEMU_TRY(bool deleted, txn.del(impl.baselines, name));
    if (!deleted)
      return make_error(ErrorCode::not_found,
                        "no baseline " + name + " in the store at " + impl.dir);
    return {};
  });
}

// ---- runs: "<started_ms big-endian><id>" -> JSON
// -------------------------------------------------

Result<std::string> Store::put_run(Json run) {
  if (!run.is_object())
    return make_error(ErrorCode::invalid_argument, "a run must be a JSON object");
  Impl& impl = *m_impl;
  return Impl::guard([&]() -> Result<std::string> {
    const bool has_id = run.contains("id");
    if (has_id) {
      if (!run["id"].is_string())
        return make_error(ErrorCode::invalid_argument, "a run's id must be a string");
      GPUEMU_TRY_STATUS(check_name("run id", run["id"].get<std::string>()));
    }
    if (!run.contains("started_ms")) run["started_ms"] = store_codec::now_ms();
    if (!run["started_ms"].is_number_integer() || run["started_ms"].get<std::int64_t>() < 0)
      return make_error(ErrorCode::invalid_argument,
                        "a run's started_ms must be a non-negative integer");
    const std::int64_t started = run["started_ms"].get<std::int64_t>();

    auto written = impl.write([&](lmdb::Txn& txn) -> Result<std::string> {
      Json stored = run;  // the id is drawn afresh on each attempt
      for (int attempt = 0; attempt < 16; ++attempt) {
        if (!has_id) stored["id"] = impl.ids.next('r');
        const std::string id = stored["id"].get<std::string>();
        GPUEMU_TRY(bool inserted, txn.put(impl.runs, store_codec::run_key(started, id),
                                          dump_json(stored), MDB_NOOVERWRITE));
        if (inserted) {
          if (impl.options.outbox)
            GPUEMU_TRY_STATUS(txn.put(impl.outbox,
                                      store_codec::outbox_key(store_codec::now_ms(), 'r', id),
                                      dump_json(Json{{"started_ms", started}})));
          return id;
        }
        if (has_id)
          return make_error(ErrorCode::conflict,
                            "run " + id + " already exists in the store at " + impl.dir);
      }
      return make_error(ErrorCode::internal, "could not draw an unused run id");
    });
    if (written) ++impl.changes;
    return written;
  });
}

Result<std::vector<Json>> Store::list_runs(std::size_t limit) const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::vector<Json>> {
    std::vector<Json> out;
    GPUEMU_TRY(lmdb::Cursor cursor, txn.cursor(impl.runs));
    GPUEMU_TRY(bool at, cursor.move(MDB_LAST));
    for (; at && (limit == 0 || out.size() < limit);) {
      GPUEMU_TRY(Json run, parse_stored_json(cursor.value(), "a run in " + impl.dir));
      out.push_back(std::move(run));
      GPUEMU_TRY(at, cursor.move(MDB_PREV));
    }
    return out;
  });
}

Result<std::optional<Json>> Store::get_run(std::int64_t started_ms, const std::string& id) const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<std::optional<Json>> {
    GPUEMU_TRY(auto text, txn.get(impl.runs, store_codec::run_key(started_ms, id)));
    if (!text) return std::optional<Json>();
    GPUEMU_TRY(Json value, parse_stored_json(*text, "run " + id));
    return std::optional<Json>(std::move(value));
  });
}

Result<bool> Store::import_run(const Json& run, const std::vector<std::string>& ignore) {
  if (!run.is_object() || !run.contains("id") || !run["id"].is_string() ||
      !run.contains("started_ms") || !run["started_ms"].is_number_integer() ||
      run["started_ms"].get<std::int64_t>() < 0)
    return make_error(ErrorCode::invalid_argument,
                      "an imported run needs a string 'id' and a non-negative integer 'started_ms'");
  const std::string id = run["id"].get<std::string>();
  GPUEMU_TRY_STATUS(check_name("run id", id));
  const std::int64_t started = run["started_ms"].get<std::int64_t>();
  Impl& impl = *m_impl;
  auto done = impl.write([&](lmdb::Txn& txn) -> Result<bool> {
    const std::string key = store_codec::run_key(started, id);
    GPUEMU_TRY(auto held, txn.get(impl.runs, key));
    if (held) {
      GPUEMU_TRY(Json stored, parse_stored_json(*held, "run " + id));
      Json mine = run;
      for (const auto& k : ignore) {
        stored.erase(k);
        mine.erase(k);
      }
      if (stored != mine)
        return make_error(ErrorCode::conflict,
                          "run " + id + " is stored in " + impl.dir + " with other content");
      return false;
    }
    GPUEMU_TRY_STATUS(txn.put(impl.runs, key, dump_json(run)));
    return true;
  });
  if (done && *done) ++impl.changes;
  return done;
}

// ---- stats
// ---------------------------------------------------------------------------------------

Result<StoreStats> Store::stats() const {
  const Impl& impl = *m_impl;
  return impl.read([&](const lmdb::Txn& txn) -> Result<StoreStats> {
    StoreStats stats;
    GPUEMU_TRY(MDB_stat failures, txn.stat(impl.failures));
    GPUEMU_TRY(MDB_stat calibrations, txn.stat(impl.calibrations));
    GPUEMU_TRY(MDB_stat baselines, txn.stat(impl.baselines));
    GPUEMU_TRY(MDB_stat runs, txn.stat(impl.runs));
    GPUEMU_TRY(MDB_stat outbox, txn.stat(impl.outbox));
    stats.outbox = outbox.ms_entries;
    stats.failures = failures.ms_entries;
    stats.calibrations = calibrations.ms_entries;
    stats.baselines = baselines.ms_entries;
    stats.runs = runs.ms_entries;
    stats.map_bytes = impl.env.map_size();
    stats.used_bytes = impl.env.used_bytes();
    stats.version = k_store_version;
    return stats;
  });
}

}  // namespace gpuemu
