// The LMDB failure store's API (daemon/store, docs/store.md): round trips, ids, listing, deletion
// and the JSON tables. Growth, limits, versions, threads and crashes: store_durability_test.cpp.
#include "store_test_support.hpp"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

namespace gpuemu::store_test {
namespace {

TEST_F(StoreTest, CreatesPrivateDirectoryWithDataAndLockFiles) {
  auto store = open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->dir(), m_dir);
  const auto perms = std::filesystem::status(m_dir).permissions();
  EXPECT_EQ(perms & std::filesystem::perms::all, std::filesystem::perms::owner_all);
  EXPECT_TRUE(std::filesystem::exists(m_dir + "/data.mdb"));
  EXPECT_TRUE(std::filesystem::exists(m_dir + "/lock.mdb"));
  auto stats = store->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->version, k_store_version);
  EXPECT_EQ(stats->failures, 0u);
  store.reset();
  RawLmdb raw(m_dir);
  EXPECT_EQ(raw.get("meta", "version"), std::to_string(k_store_version));
  EXPECT_NE(raw.get("meta", "created_ms"), "<missing>");
}

TEST_F(StoreTest, RoundTripsOneMiBOfRandomBytesExactly) {
  auto store = open();
  ASSERT_TRUE(store);
  FailureRecord record = make_record("softmax", 1'700'000'000'123, std::size_t{1} << 20, 42);
  record.meta["kernel"] = {{"name", "softmax_fwd"}, {"file", "k.py"}, {"line", 17}};
  record.meta["note"] = "naïve ✓";
  const FailureRecord original = record;
  auto id = store->put_failure(record);
  ASSERT_TRUE(id.ok()) << id.error().what();
  EXPECT_TRUE(std::regex_match(*id, std::regex("f[0-9a-f]{16}"))) << *id;

  auto got = store->get_failure(*id);
  ASSERT_TRUE(got.ok()) << got.error().what();
  EXPECT_EQ(got->id, *id);
  EXPECT_EQ(got->op, "softmax");
  EXPECT_EQ(got->created_ms, original.created_ms);
  EXPECT_EQ(got->meta, original.meta);
  ASSERT_EQ(got->inputs.size(), original.inputs.size());
  EXPECT_TRUE(got->inputs == original.inputs);

  auto list = store->list_failures({});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].input_bytes, std::size_t{1} << 20);
  EXPECT_EQ((*list)[0].meta, original.meta);

  // No inputs at all, and created_ms filled in when 0.
  FailureRecord empty;
  empty.op = "sum";
  auto empty_id = store->put_failure(empty);
  ASSERT_TRUE(empty_id.ok()) << empty_id.error().what();
  auto empty_got = store->get_failure(*empty_id);
  ASSERT_TRUE(empty_got.ok()) << empty_got.error().what();
  EXPECT_TRUE(empty_got->inputs.empty());
  EXPECT_GT(empty_got->created_ms, 1'600'000'000'000);
}

TEST_F(StoreTest, AssignsUniqueIdsAndNeverOverwrites) {
  auto store = open();
  ASSERT_TRUE(store);
  std::set<std::string> ids;
  const std::regex id_form("f[0-9a-f]{16}");
  for (int i = 0; i < 100; ++i) {  // one transaction each
    auto id = store->put_failure(make_record("add", 1000 + i, 16, static_cast<std::uint64_t>(i)));
    ASSERT_TRUE(id.ok()) << id.error().what();
    EXPECT_TRUE(std::regex_match(*id, id_form)) << *id;
    ids.insert(*id);
  }
  std::vector<FailureRecord> batch;  // and many in one transaction
  for (int i = 0; i < 400; ++i)
    batch.push_back(make_record("add", 5000 + i, 16, 1000 + static_cast<std::uint64_t>(i)));
  auto batch_ids = store->put_failures(batch);
  ASSERT_TRUE(batch_ids.ok()) << batch_ids.error().what();
  ASSERT_EQ(batch_ids->size(), 400u);
  for (const auto& id : *batch_ids) {
    EXPECT_TRUE(std::regex_match(id, id_form)) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 500u);
  EXPECT_EQ(store->stats()->failures, 500u);
  EXPECT_EQ(store->list_failures({})->size(), 500u);
}

TEST_F(StoreTest, ExplicitDuplicateIdIsAConflictAndChangesNothing) {
  auto store = open();
  ASSERT_TRUE(store);
  FailureRecord first = make_record("mul", 5000, 256, 1);
  first.id = "mine";
  ASSERT_TRUE(store->put_failure(first).ok());

  FailureRecord second = make_record("add", 6000, 256, 2);
  second.id = "mine";
  auto clash = store->put_failure(second);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.error().code, ErrorCode::conflict);
  EXPECT_NE(clash.error().message.find("mine"), std::string::npos);

  // A batch holding a clash is refused whole: its new record is not stored either.
  std::vector<FailureRecord> batch{make_record("add", 7000, 8, 3), second};
  batch[0].id = "fresh";
  auto batch_result = store->put_failures(batch);
  ASSERT_FALSE(batch_result.ok());
  EXPECT_EQ(batch_result.error().code, ErrorCode::conflict);
  EXPECT_EQ(store->get_failure("fresh").error().code, ErrorCode::not_found);

  auto kept = store->get_failure("mine");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->op, "mul");
  EXPECT_TRUE(kept->inputs == first.inputs);
  EXPECT_EQ(store->list_failures({})->size(), 1u);

  FailureRecord nameless = make_record("", 1, 1, 1);
  EXPECT_EQ(store->put_failure(nameless).error().code, ErrorCode::invalid_argument);
}

TEST_F(StoreTest, ListsNewestFirstByOpSinceAndLimit) {
  auto store = open();
  ASSERT_TRUE(store);
  // "sum" is a prefix of "sum_sq"; times interleave across ops.
  const std::vector<std::pair<std::string, std::int64_t>> plan = {
      {"sum", 100},    {"sum_sq", 150}, {"sum", 200},  {"mean", 250},
      {"sum_sq", 300}, {"sum", 400},    {"mean", 450}, {"sum_sq", 500}};
  std::map<std::int64_t, std::string> id_at;
  std::vector<FailureRecord> batch;
  for (const auto& [op, t] : plan)
    batch.push_back(make_record(op, t, 100, static_cast<std::uint64_t>(t)));
  auto put = store->put_failures(batch);
  ASSERT_TRUE(put.ok()) << put.error().what();
  for (std::size_t i = 0; i < plan.size(); ++i) id_at[plan[i].second] = (*put)[i];
  auto ids_at = [&](std::vector<std::int64_t> times) {
    std::vector<std::string> out;
    for (auto t : times) out.push_back(id_at[t]);
    return out;
  };
  auto list = [&](std::string op, std::int64_t since, std::size_t limit) {
    auto r = store->list_failures({op, since, limit});
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().what());
    return r.ok() ? ids_of(*r) : std::vector<std::string>{"<error>"};
  };

  EXPECT_EQ(list("", 0, 0), ids_at({500, 450, 400, 300, 250, 200, 150, 100}));
  EXPECT_EQ(list("sum", 0, 0), ids_at({400, 200, 100}));
  EXPECT_EQ(list("sum_sq", 0, 0), ids_at({500, 300, 150}));
  EXPECT_EQ(list("mean", 0, 0), ids_at({450, 250}));
  EXPECT_EQ(list("su", 0, 0), std::vector<std::string>{});
  EXPECT_EQ(list("a", 0, 0), std::vector<std::string>{});    // sorts before every op
  EXPECT_EQ(list("zzz", 0, 0), std::vector<std::string>{});  // sorts after every op
  EXPECT_EQ(list("", 300, 0), ids_at({500, 450, 400, 300}));
  EXPECT_EQ(list("sum", 200, 0), ids_at({400, 200}));
  EXPECT_EQ(list("", 0, 3), ids_at({500, 450, 400}));
  EXPECT_EQ(list("sum_sq", 0, 2), ids_at({500, 300}));
  EXPECT_EQ(list("sum", 150, 1), ids_at({400}));
  EXPECT_EQ(list("", 501, 0), std::vector<std::string>{});

  auto summaries = store->list_failures({"sum", 0, 0});
  ASSERT_TRUE(summaries.ok());
  for (const auto& s : *summaries) {
    EXPECT_EQ(s.op, "sum");
    EXPECT_EQ(s.input_bytes, 100u);
    EXPECT_EQ(s.meta["dtype"], "float16");
  }
}

TEST_F(StoreTest, DeleteRemovesRecordAndIndexEntry) {
  auto store = open();
  ASSERT_TRUE(store);
  auto a = store->put_failure(make_record("relu", 10, 64, 1));
  auto b = store->put_failure(make_record("relu", 20, 64, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(store->delete_failure(*a).ok());
  EXPECT_EQ(store->get_failure(*a).error().code, ErrorCode::not_found);
  EXPECT_EQ(store->delete_failure(*a).error().code, ErrorCode::not_found);
  EXPECT_EQ(store->get_failure("f0000000000000000").error().code, ErrorCode::not_found);
  EXPECT_EQ(ids_of(*store->list_failures({"relu", 0, 0})), std::vector<std::string>{*b});
  EXPECT_EQ(ids_of(*store->list_failures({})), std::vector<std::string>{*b});
  EXPECT_EQ(store->stats()->failures, 1u);
}

TEST_F(StoreTest, ChangesCountsCommittedFailureAndRunWritesOnly) {
  auto store = open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->changes(), 0u);
  auto id = store->put_failure(make_record("softmax", 0, 16, 1));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(store->changes(), 1u);
  FailureRecord dup = make_record("softmax", 0, 16, 2);
  dup.id = *id;
  EXPECT_EQ(store->put_failure(dup).error().code, ErrorCode::conflict);
  EXPECT_EQ(store->changes(), 1u);  // a refused write changes nothing
  ASSERT_TRUE(store->put_run({{"op", "softmax"}}).ok());
  EXPECT_EQ(store->changes(), 2u);
  ASSERT_TRUE(store->put_calibration("softmax", "float32", {{"envelope", 3.0}}).ok());
  EXPECT_EQ(store->changes(), 2u);  // calibrations are not failures or runs
  ASSERT_TRUE(store->delete_failure(*id).ok());
  EXPECT_EQ(store->changes(), 3u);
  EXPECT_EQ(store->delete_failure(*id).error().code, ErrorCode::not_found);
  EXPECT_EQ(store->changes(), 3u);
}

TEST_F(StoreTest, CalibrationsBaselinesAndRunsRoundTrip) {
  auto store = open();
  ASSERT_TRUE(store);
  const Json cal = {{"envelope", 2.5}, {"cases", 200}};
  ASSERT_TRUE(store->put_calibration("softmax", "float16", cal).ok());
  ASSERT_TRUE(store->put_calibration("softmax", "bfloat16", {{"envelope", 3}}).ok());
  ASSERT_TRUE(store->put_calibration("softmax", "float16", {{"envelope", 2.75}}).ok());  // replaces
  EXPECT_EQ(**store->get_calibration("softmax", "float16"), (Json{{"envelope", 2.75}}));
  EXPECT_FALSE(store->get_calibration("softmax", "float32")->has_value());
  auto cals = store->list_calibrations();
  ASSERT_TRUE(cals.ok());
  ASSERT_EQ(cals->size(), 2u);
  EXPECT_EQ((*cals)[0], (Json{{"envelope", 3}, {"op", "softmax"}, {"dtype", "bfloat16"}}));
  EXPECT_EQ((*cals)[1]["dtype"], "float16");
  EXPECT_EQ(store->put_calibration("softmax", "float16", Json::array()).error().code,
            ErrorCode::invalid_argument);

  const Json base = {{"kernels", Json::array({{{"name", "k"}, {"registers", 10}}})}};
  ASSERT_TRUE(store->put_baseline("main", base).ok());
  ASSERT_TRUE(store->put_baseline("a-branch", {{"kernels", Json::array()}}).ok());
  EXPECT_EQ(**store->get_baseline("main"), base);
  EXPECT_FALSE(store->get_baseline("none")->has_value());
  EXPECT_EQ(*store->list_baselines(), (std::vector<std::string>{"a-branch", "main"}));
  ASSERT_TRUE(store->delete_baseline("a-branch").ok());
  EXPECT_EQ(store->delete_baseline("a-branch").error().code, ErrorCode::not_found);
  EXPECT_EQ(*store->list_baselines(), std::vector<std::string>{"main"});

  auto r1 = store->put_run({{"op", "sum"}, {"started_ms", 1000}, {"cases", 10}});
  auto r2 = store->put_run({{"op", "mean"}, {"started_ms", 3000}});
  auto r3 = store->put_run({{"op", "add"}, {"started_ms", 2000}, {"id", "run-x"}});
  auto r4 = store->put_run({{"op", "now"}});
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok() && r4.ok());
  EXPECT_TRUE(std::regex_match(*r1, std::regex("r[0-9a-f]{16}")));
  EXPECT_EQ(*r3, "run-x");
  EXPECT_EQ(store->put_run({{"started_ms", 2000}, {"id", "run-x"}}).error().code,
            ErrorCode::conflict);
  auto runs = store->list_runs(0);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_EQ((*runs)[0]["op"], "now");
  EXPECT_EQ((*runs)[0]["id"], *r4);
  EXPECT_EQ((*runs)[1], (Json{{"op", "mean"}, {"started_ms", 3000}, {"id", *r2}}));
  EXPECT_EQ((*runs)[2]["id"], "run-x");
  EXPECT_EQ((*runs)[3]["cases"], 10);
  EXPECT_EQ(store->list_runs(2)->size(), 2u);

  auto stats = store->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->calibrations, 2u);
  EXPECT_EQ(stats->baselines, 1u);
  EXPECT_EQ(stats->runs, 4u);
}

}  // namespace
}  // namespace gpuemu::store_test
