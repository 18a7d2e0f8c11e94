// Small RAII wrappers over the LMDB C API, in the manner of lmdbxx, but returning values instead of
// throwing: move-only Env / Txn / Dbi / Cursor; a Txn's destructor aborts it unless it was
// committed; "not found" is an empty optional (get, cursor moves) or `false` (put with
// MDB_NOOVERWRITE, del). Every other LMDB failure becomes a gpuemu Error naming the call, the
// mdb_strerror text and the store's path, classified by `classify`:
//   map_full   -> ErrorCode::storage_full  (the Txn also remembers it: `Txn::map_full()`, which
//                                           the Store uses to grow the map and retry)
//   disk_full  -> ErrorCode::storage_full  (ENOSPC / EDQUOT: no point in growing the map)
//   corrupted  -> ErrorCode::io_error, message starting "store corrupted"
//   other      -> ErrorCode::io_error
// Internal to gpuemu_store; nothing outside daemon/store includes this.
#pragma once

#include "gpuemu/base/error.hpp"

#include <lmdb.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace gpuemu::lmdb {

enum class Failure { map_full, disk_full, corrupted, other };
Failure classify(int rc);

// The Error for LMDB return code `rc` from `call` on the store at `path`.
Error make_lmdb_error(int rc, std::string_view call, const std::string& path);

inline MDB_val to_val(std::string_view bytes) {
  return MDB_val{bytes.size(), const_cast<char*>(bytes.data())};
}
inline std::string_view from_val(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

class Env {
 public:
  struct Options {
    unsigned flags = 0;         // MDB_NOTLS, ...
    unsigned max_dbs = 0;       // mdb_env_set_maxdbs
    std::size_t map_bytes = 0;  // mdb_env_set_mapsize before opening
  };
  // Opens the environment in directory `path` (data.mdb and lock.mdb inside it), file mode 0600.
  static Result<Env> open(const std::string& path, const Options& options);

  Env() = default;
  ~Env();
  Env(Env&& other) noexcept;
  Env& operator=(Env&& other) noexcept;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  MDB_env* get() const { return m_env; }
  const std::string& path() const { return m_path; }

  // mdb_env_set_mapsize: the caller guarantees no transaction of this process is active.
  // 0 adopts the size another process set.
  Status set_map_size(std::size_t bytes);
  std::size_t map_size() const;
  std::size_t used_bytes() const;  // (last used page + 1) × page size
  // Releases reader slots left by dead processes; returns how many.
  int clear_stale_readers() const;

 private:
  MDB_env* m_env = nullptr;
  std::string m_path;
};

// A database handle. LMDB handles live as long as the environment and need no closing (closing one
// is discouraged by LMDB's docs), so this only names the handle.
class Dbi {
 public:
  Dbi() = default;
  explicit Dbi(MDB_dbi dbi) : m_dbi(dbi) {}
  MDB_dbi get() const { return m_dbi; }

 private:
  MDB_dbi m_dbi = 0;
};

class Cursor;

class Txn {
 public:
  Txn(const Env& env, MDB_txn* txn) : m_env(&env), m_txn(txn) {}
  // `raw_rc`, when given, receives LMDB's code (MDB_MAP_RESIZED is the caller's to handle).
  static Result<Txn> begin(const Env& env, bool read_only, int* raw_rc = nullptr);

  Txn() = default;
  ~Txn() { abort(); }
  Txn(Txn&& other) noexcept;
  Txn& operator=(Txn&& other) noexcept;
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

  Status commit();
  void abort();
  MDB_txn* get() const { return m_txn; }
  const Env& env() const { return *m_env; }
  // True once any call on this transaction failed with MDB_MAP_FULL.
  bool map_full() const { return m_map_full; }

  Result<Dbi> open_dbi(const char* name, unsigned flags);
  // The bytes live in the map: valid until the transaction ends.
  Result<std::optional<std::string_view>> get(Dbi dbi, std::string_view key) const;
  // False when `flags` has MDB_NOOVERWRITE and the key exists.
  Result<bool> put(Dbi dbi, std::string_view key, std::string_view value, unsigned flags = 0);
  // False when the key does not exist.
  Result<bool> del(Dbi dbi, std::string_view key);
  Result<MDB_stat> stat(Dbi dbi) const;
  Result<Cursor> cursor(Dbi dbi) const;

  Error error(int rc, std::string_view call) const;

 private:
  Error note(int rc, std::string_view call);

  const Env* m_env = nullptr;
  MDB_txn* m_txn = nullptr;
  bool m_map_full = false;
};

// A cursor; must not outlive its transaction (close it, by destruction, before commit).
class Cursor {
 public:
  Cursor(const Env& env, MDB_cursor* cursor) : m_env(&env), m_cursor(cursor) {}
  ~Cursor();
  Cursor(Cursor&& other) noexcept;
  Cursor& operator=(Cursor&& other) noexcept;
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  // Moves the cursor (MDB_FIRST, MDB_LAST, MDB_NEXT, MDB_PREV); false when there is no entry
  // there. After a true, key() and value() show the entry (bytes in the map: valid until the
  // transaction ends or the cursor moves).
  Result<bool> move(MDB_cursor_op op);
  // MDB_SET_RANGE: to the first key >= `key`; false when there is none.
  Result<bool> seek(std::string_view key);
  std::string_view key() const { return from_val(m_key); }
  std::string_view value() const { return from_val(m_value); }

 private:
  Result<bool> fetch(MDB_cursor_op op, std::string_view call);

  const Env* m_env = nullptr;
  MDB_cursor* m_cursor = nullptr;
  MDB_val m_key{}, m_value{};
};

}  // namespace gpuemu::lmdb
