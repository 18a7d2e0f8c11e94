// Content-derived failure ids and the outbox of a pushing daemon (docs/scale.md, docs/store.md):
// the same failure stored twice is one record; what is stored is queued in the same transaction,
// survives a reopen, leaves only when acknowledged, and a refused entry is set aside, not lost.
#include "store_test_support.hpp"

#include <gtest/gtest.h>

namespace gpuemu::store_test {
namespace {

TEST_F(StoreTest, TheSameFailureStoredTwiceIsOneRecordUnderItsContentId) {
  auto store = open();
  ASSERT_TRUE(store);
  const FailureRecord a = make_record("softmax", 1000, 256, 5);
  auto first = store->put_failure(a);
  ASSERT_TRUE(first.ok()) << first.error().what();
  FailureRecord later = a;
  later.created_ms = 9000;  // when it was found again is not what it is
  auto second = store->put_failure(later);
  ASSERT_TRUE(second.ok()) << second.error().what();
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(store->stats()->failures, 1u);
  EXPECT_EQ(store->list_failures({})->size(), 1u);
  // In one transaction too, and anything that differs (meta, bytes, op) is another record.
  FailureRecord other_meta = a, other_bytes = a, other_op = a;
  other_meta.meta["dtype"] = "bfloat16";
  other_bytes.inputs[17] ^= std::byte{1};
  other_op.op = "log_softmax";
  auto ids = store->put_failures({a, other_meta, other_bytes, other_op, other_meta});
  ASSERT_TRUE(ids.ok()) << ids.error().what();
  EXPECT_EQ((*ids)[0], *first);
  EXPECT_EQ((*ids)[1], (*ids)[4]);
  EXPECT_EQ(std::set<std::string>(ids->begin(), ids->end()).size(), 4u);
  EXPECT_EQ(store->stats()->failures, 4u);
  // The id is the content's on any store: another store gives the same one.
  StoreOptions o;
  auto elsewhere = Store::open(m_root + "/elsewhere", o);
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(*(*elsewhere)->put_failure(a), *first);
}

TEST_F(StoreTest, TheOutboxQueuesWhatIsStoredUntilItIsAcknowledged) {
  StoreOptions o;
  o.outbox = true;
  std::vector<std::string> ids;
  {
    auto store = open(o);
    ASSERT_TRUE(store);
    for (int i = 0; i < 3; ++i)
      ids.push_back(*store->put_failure(make_record("add", 10 + i, 64, 100 + static_cast<std::uint64_t>(i))));
    auto run = store->put_run({{"op", "add"}, {"started_ms", 20}});
    ASSERT_TRUE(run.ok());
    // stored again: nothing new to push
    ASSERT_EQ(*store->put_failure(make_record("add", 99, 64, 100)), ids[0]);
  }
  auto store = open(o);  // what was queued survives a restart
  ASSERT_TRUE(store);
  auto items = store->outbox_peek(0);
  ASSERT_TRUE(items.ok()) << items.error().what();
  ASSERT_EQ(items->size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*items)[static_cast<std::size_t>(i)].kind, 'f');
    EXPECT_EQ((*items)[static_cast<std::size_t>(i)].id, ids[static_cast<std::size_t>(i)]);
  }
  EXPECT_EQ((*items)[3].kind, 'r');
  EXPECT_EQ((*items)[3].started_ms, 20);
  ASSERT_TRUE(store->get_run(20, (*items)[3].id)->has_value());
  EXPECT_EQ(store->outbox_peek(2)->size(), 2u);
  EXPECT_EQ(store->stats()->outbox, 4u);

  ASSERT_TRUE(store->outbox_done({(*items)[0].key, (*items)[1].key}).ok());
  ASSERT_TRUE(store->outbox_reject((*items)[2].key, "unknown op on the central daemon").ok());
  auto pending = store->outbox_peek(0);
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].kind, 'r');
  auto s = store->outbox_stats();
  EXPECT_EQ(s->pending, 1u);
  EXPECT_EQ(s->rejected, 1u);
  auto rejected = store->outbox_rejected(0);
  ASSERT_EQ(rejected->size(), 1u);
  EXPECT_EQ((*rejected)[0].id, ids[2]);
  EXPECT_EQ((*rejected)[0].rejected, "unknown op on the central daemon");
  EXPECT_EQ(*store->outbox_retry_rejected(), 1u);
  EXPECT_EQ(store->outbox_peek(0)->size(), 2u);
  EXPECT_EQ(store->outbox_stats()->rejected, 0u);
  // The failures themselves never left.
  EXPECT_EQ(store->stats()->failures, 3u);
}

TEST_F(StoreTest, WithoutTheOutboxNothingIsQueuedAndABacklogIsQueuedOnce) {
  {
    auto store = open();
    ASSERT_TRUE(store);
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(store->put_failure(make_record(i % 2 ? "add" : "mul", 10 + i, 32, 7 + static_cast<std::uint64_t>(i))).ok());
    ASSERT_TRUE(store->put_run({{"op", "add"}, {"started_ms", 50}}).ok());
    EXPECT_EQ(store->outbox_stats()->pending, 0u);
  }
  StoreOptions o;
  o.outbox = true;
  auto store = open(o);
  FailureQuery only_add;
  only_add.op = "add";
  EXPECT_EQ(*store->outbox_enqueue_stored(only_add, false), 2u);
  EXPECT_EQ(*store->outbox_enqueue_stored({}, true), 3u);  // the two others and the run
  EXPECT_EQ(*store->outbox_enqueue_stored({}, true), 0u);  // queued already
  auto items = store->outbox_peek(0);
  ASSERT_EQ(items->size(), 5u);
}

TEST_F(StoreTest, AnImportedRunIsStoredOnceAndAClashIsAConflict) {
  auto store = open();
  ASSERT_TRUE(store);
  const Json run = {{"id", "r0123456789abcdef"}, {"started_ms", 77}, {"op", "add"}, {"total", 5}};
  EXPECT_TRUE(*store->import_run(run));
  EXPECT_FALSE(*store->import_run(run));
  Json copy = run;
  copy["pushed_from"] = {{"host", "w1"}};
  EXPECT_FALSE(*store->import_run(copy, {"pushed_from"}));
  Json clash = run;
  clash["total"] = 6;
  auto r = store->import_run(clash);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::conflict);
  EXPECT_EQ(store->list_runs(0)->size(), 1u);
  EXPECT_FALSE(store->import_run({{"id", "x"}}).ok());  // no started_ms
}

}  // namespace
}  // namespace gpuemu::store_test
