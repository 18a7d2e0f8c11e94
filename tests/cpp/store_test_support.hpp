// Helpers shared by store_test.cpp and store_durability_test.cpp: deterministic random bytes,
// records, a fresh temporary store directory per test, and raw LMDB access behind the Store's back.
#pragma once

#include "gpuemu/store/store.hpp"

#include <gtest/gtest.h>
#include <lmdb.h>
#include <stdlib.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace gpuemu::store_test {

inline std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t word = rng();
    for (std::size_t j = 0; j < 8 && i + j < n; ++j)
      out[i + j] = static_cast<std::byte>((word >> (8 * j)) & 0xff);
  }
  return out;
}

inline FailureRecord make_record(std::string op, std::int64_t created_ms, std::size_t bytes,
                                 std::uint64_t seed) {
  FailureRecord r;
  r.op = std::move(op);
  r.created_ms = created_ms;
  r.meta = {{"seed", seed}, {"dtype", "float16"}, {"dims", {{"N", 1024}}}};
  r.inputs = random_bytes(bytes, seed);
  return r;
}

inline std::vector<std::string> ids_of(const std::vector<FailureSummary>& list) {
  std::vector<std::string> ids;
  for (const auto& s : list) ids.push_back(s.id);
  return ids;
}

// Raw LMDB access to a store directory, behind the Store's back.
struct RawLmdb {
  MDB_env* env = nullptr;
  explicit RawLmdb(const std::string& dir) {
    EXPECT_EQ(mdb_env_create(&env), 0);
    EXPECT_EQ(mdb_env_set_maxdbs(env, 8), 0);
    EXPECT_EQ(mdb_env_open(env, dir.c_str(), 0, 0600), 0);
  }
  ~RawLmdb() { mdb_env_close(env); }
  std::string get(const char* db, const std::string& key) {
    MDB_txn* txn = nullptr;
    EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), 0);
    MDB_dbi dbi = 0;
    EXPECT_EQ(mdb_dbi_open(txn, db, 0, &dbi), 0);
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v{};
    std::string out = mdb_get(txn, dbi, &k, &v) == 0
                          ? std::string(static_cast<const char*>(v.mv_data), v.mv_size)
                          : "<missing>";
    mdb_txn_abort(txn);
    return out;
  }
  std::size_t entries(const char* db) {
    MDB_txn* txn = nullptr;
    EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), 0);
    MDB_dbi dbi = 0;
    EXPECT_EQ(mdb_dbi_open(txn, db, 0, &dbi), 0);
    MDB_stat st{};
    mdb_stat(txn, dbi, &st);
    mdb_txn_abort(txn);
    return st.ms_entries;
  }
  void put(const char* db, const std::string& key, const std::string& value) {
    MDB_txn* txn = nullptr;
    ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
    MDB_dbi dbi = 0;
    ASSERT_EQ(mdb_dbi_open(txn, db, 0, &dbi), 0);
    MDB_val k{key.size(), const_cast<char*>(key.data())};
    MDB_val v{value.size(), const_cast<char*>(value.data())};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
    ASSERT_EQ(mdb_txn_commit(txn), 0);
  }
};

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuemu-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    m_root = tmpl;
    m_dir = m_root + "/store";  // missing: open must create it
  }
  void TearDown() override { std::filesystem::remove_all(m_root); }

  std::unique_ptr<Store> open(StoreOptions options = {}) {
    auto store = Store::open(m_dir, options);
    EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.error().what());
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::string m_root, m_dir;
};

}  // namespace gpuemu::store_test
