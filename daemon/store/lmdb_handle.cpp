#include "lmdb_handle.hpp"

#include <sys/statvfs.h>

#include <cerrno>

namespace gpuemu::lmdb {

Failure classify(int rc) {
  switch (rc) {
    case MDB_MAP_FULL:
      return Failure::map_full;
    case ENOSPC:
    case EDQUOT:
      return Failure::disk_full;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
      return Failure::corrupted;
    default:
      return Failure::other;
  }
}

namespace {

// Bytes an unprivileged writer may still use on the filesystem holding `path` (-1: unknown).
long long free_bytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return -1;
  return static_cast<long long>(st.f_bavail) * static_cast<long long>(st.f_frsize);
}

// LMDB turns a short write into EIO (mdb_page_flush, mdb_env_write_meta): when the disk has less
// than this left, an EIO is the disk being full, and the user is told so.
constexpr long long k_nearly_full_bytes = 1 << 20;

}  // namespace

Error make_lmdb_error(int rc, std::string_view call, const std::string& path) {
  std::string text = std::string(call) + ": " + mdb_strerror(rc) + " (store " + path + ")";
  Failure failure = classify(rc);
  if (failure == Failure::disk_full || rc == EIO) {
    const long long left = free_bytes(path);
    if (left >= 0 && (failure == Failure::disk_full || left < k_nearly_full_bytes)) {
      failure = Failure::disk_full;
      text += "; " + std::to_string(left / 1024) +
              " KiB free on its filesystem: free some space (this write was not stored; what was "
              "stored before stays)";
    }
  }
  switch (failure) {
    case Failure::map_full:
      return make_error(ErrorCode::storage_full, "store map full: " + text);
    case Failure::disk_full:
      return make_error(ErrorCode::storage_full, "disk full: " + text);
    case Failure::corrupted:
      return make_error(ErrorCode::io_error, "store corrupted: " + text);
    case Failure::other:
      break;
  }
  return make_error(ErrorCode::io_error, text);
}

// ---- Env -------------------------------------------------------------------------------------

Result<Env> Env::open(const std::string& path, const Options& options) {
  Env env;
  env.m_path = path;
  if (int rc = mdb_env_create(&env.m_env); rc != 0) {
    env.m_env = nullptr;
    return make_lmdb_error(rc, "mdb_env_create", path);
  }
  if (int rc = mdb_env_set_maxdbs(env.m_env, options.max_dbs); rc != 0)
    return make_lmdb_error(rc, "mdb_env_set_maxdbs", path);
  if (options.map_bytes != 0) {
    if (int rc = mdb_env_set_mapsize(env.m_env, options.map_bytes); rc != 0)
      return make_lmdb_error(rc, "mdb_env_set_mapsize", path);
  }
  if (int rc = mdb_env_open(env.m_env, path.c_str(), options.flags, 0600); rc != 0)
    return make_lmdb_error(rc, "mdb_env_open", path);
  return env;
}

Env::~Env() {
  if (m_env) mdb_env_close(m_env);
}

Env::Env(Env&& other) noexcept
    : m_env(std::exchange(other.m_env, nullptr)), m_path(std::move(other.m_path)) {}

Env& Env::operator=(Env&& other) noexcept {
  if (this != &other) {
    if (m_env) mdb_env_close(m_env);
    m_env = std::exchange(other.m_env, nullptr);
    m_path = std::move(other.m_path);
  }
  return *this;
}

Status Env::set_map_size(std::size_t bytes) {
  if (int rc = mdb_env_set_mapsize(m_env, bytes); rc != 0)
    return make_lmdb_error(rc, "mdb_env_set_mapsize", m_path);
  return {};
}

std::size_t Env::map_size() const {
  MDB_envinfo info{};
  mdb_env_info(m_env, &info);
  return info.me_mapsize;
}

std::size_t Env::used_bytes() const {
  MDB_envinfo info{};
  MDB_stat st{};
  mdb_env_info(m_env, &info);
  mdb_env_stat(m_env, &st);
  return (info.me_last_pgno + 1) * std::size_t{st.ms_psize};
}

int Env::clear_stale_readers() const {
  int dead = 0;
  mdb_reader_check(m_env, &dead);
  return dead;
}

// ---- Txn -------------------------------------------------------------------------------------

Result<Txn> Txn::begin(const Env& env, bool read_only, int* raw_rc) {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env.get(), nullptr, read_only ? MDB_RDONLY : 0u, &txn);
  if (raw_rc) *raw_rc = rc;
  if (rc != 0) return make_lmdb_error(rc, "mdb_txn_begin", env.path());
  return Txn(env, txn);
}

Txn::Txn(Txn&& other) noexcept
    : m_env(other.m_env),
      m_txn(std::exchange(other.m_txn, nullptr)),
      m_map_full(other.m_map_full) {}

Txn& Txn::operator=(Txn&& other) noexcept {
  if (this != &other) {
    abort();
    m_env = other.m_env;
    m_txn = std::exchange(other.m_txn, nullptr);
    m_map_full = other.m_map_full;
  }
  return *this;
}

Status Txn::commit() {
  MDB_txn* txn = std::exchange(m_txn, nullptr);  // commit frees the txn even when it fails
  if (int rc = mdb_txn_commit(txn); rc != 0) return note(rc, "mdb_txn_commit");
  return {};
}

void Txn::abort() {
  if (m_txn) mdb_txn_abort(std::exchange(m_txn, nullptr));
}

Error Txn::error(int rc, std::string_view call) const {
  return make_lmdb_error(rc, call, m_env->path());
}

Error Txn::note(int rc, std::string_view call) {
  if (rc == MDB_MAP_FULL) m_map_full = true;
  return error(rc, call);
}

Result<Dbi> Txn::open_dbi(const char* name, unsigned flags) {
  MDB_dbi dbi = 0;
  if (int rc = mdb_dbi_open(m_txn, name, flags, &dbi); rc != 0)
    return note(rc, std::string("mdb_dbi_open ") + name);
  return Dbi(dbi);
}

Result<std::optional<std::string_view>> Txn::get(Dbi dbi, std::string_view key) const {
  MDB_val k = to_val(key);
  MDB_val v{};
  int rc = mdb_get(m_txn, dbi.get(), &k, &v);
  if (rc == MDB_NOTFOUND) return std::optional<std::string_view>();
  if (rc != 0) return error(rc, "mdb_get");
  return std::optional<std::string_view>(from_val(v));
}

Result<bool> Txn::put(Dbi dbi, std::string_view key, std::string_view value, unsigned flags) {
  MDB_val k = to_val(key);
  MDB_val v = to_val(value);
  int rc = mdb_put(m_txn, dbi.get(), &k, &v, flags);
  if (rc == MDB_KEYEXIST && (flags & MDB_NOOVERWRITE)) return false;
  if (rc != 0) return note(rc, "mdb_put");
  return true;
}

Result<bool> Txn::del(Dbi dbi, std::string_view key) {
  MDB_val k = to_val(key);
  int rc = mdb_del(m_txn, dbi.get(), &k, nullptr);
  if (rc == MDB_NOTFOUND) return false;
  if (rc != 0) return note(rc, "mdb_del");
  return true;
}

Result<MDB_stat> Txn::stat(Dbi dbi) const {
  MDB_stat st{};
  if (int rc = mdb_stat(m_txn, dbi.get(), &st); rc != 0) return error(rc, "mdb_stat");
  return st;
}

Result<Cursor> Txn::cursor(Dbi dbi) const {
  MDB_cursor* cursor = nullptr;
  if (int rc = mdb_cursor_open(m_txn, dbi.get(), &cursor); rc != 0)
    return error(rc, "mdb_cursor_open");
  return Cursor(*m_env, cursor);
}

// ---- Cursor ----------------------------------------------------------------------------------

Cursor::~Cursor() {
  if (m_cursor) mdb_cursor_close(m_cursor);
}

Cursor::Cursor(Cursor&& other) noexcept
    : m_env(other.m_env),
      m_cursor(std::exchange(other.m_cursor, nullptr)),
      m_key(other.m_key),
      m_value(other.m_value) {}

Cursor& Cursor::operator=(Cursor&& other) noexcept {
  if (this != &other) {
    if (m_cursor) mdb_cursor_close(m_cursor);
    m_env = other.m_env;
    m_cursor = std::exchange(other.m_cursor, nullptr);
    m_key = other.m_key;
    m_value = other.m_value;
  }
  return *this;
}

Result<bool> Cursor::fetch(MDB_cursor_op op, std::string_view call) {
  int rc = mdb_cursor_get(m_cursor, &m_key, &m_value, op);
  if (rc == MDB_NOTFOUND) {
    m_key = m_value = MDB_val{};
    return false;
  }
  if (rc != 0) return make_lmdb_error(rc, call, m_env->path());
  return true;
}

Result<bool> Cursor::move(MDB_cursor_op op) {
  return fetch(op, "mdb_cursor_get");
}

Result<bool> Cursor::seek(std::string_view key) {
  m_key = to_val(key);
  return fetch(MDB_SET_RANGE, "mdb_cursor_get(MDB_SET_RANGE)");
}

}  // namespace gpuemu::lmdb
