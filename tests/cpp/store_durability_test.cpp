// The LMDB failure store under stress (daemon/store, docs/store.md): map growth and its limit, the
// version check, reopening, concurrent threads, and a writer killed with SIGKILL.
#include "store_test_support.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

namespace gpuemu::store_test {
namespace {

using StoreDurabilityTest = StoreTest;

TEST_F(StoreDurabilityTest, MapGrowsFromSixtyFourKiB) {
  StoreOptions options;
  options.initial_map_bytes = std::size_t{64} << 10;
  constexpr int k_records = 2000, k_single = 200, k_batch = 20;
  std::vector<std::string> ids;
  auto record = [](int i) {
    return make_record("gemm", 1 + i, 4096, static_cast<std::uint64_t>(i));
  };
  {
    auto store = open(options);
    ASSERT_TRUE(store);
    // The first ones one durable transaction each (a commit costs an fsync), the rest in batches,
    // whose whole transaction is retried when the map fills midway.
    for (int i = 0; i < k_single; ++i) {
      auto id = store->put_failure(record(i));
      ASSERT_TRUE(id.ok()) << i << ": " << id.error().what();
      ids.push_back(*id);
    }
    for (int i = k_single; i < k_records; i += k_batch) {
      std::vector<FailureRecord> batch;
      for (int j = i; j < i + k_batch; ++j) batch.push_back(record(j));
      auto put = store->put_failures(std::move(batch));
      ASSERT_TRUE(put.ok()) << i << ": " << put.error().what();
      ids.insert(ids.end(), put->begin(), put->end());
    }
    auto stats = store->stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->failures, std::size_t{k_records});
    EXPECT_GT(stats->map_bytes, std::size_t{8} << 20);
    EXPECT_LE(stats->used_bytes, stats->map_bytes);
    for (int i = 0; i < k_records; ++i) {
      auto got = store->get_failure(ids[static_cast<std::size_t>(i)]);
      ASSERT_TRUE(got.ok()) << got.error().what();
      ASSERT_TRUE(got->inputs == record(i).inputs);
    }
  }
  auto store = open(options);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->list_failures({"gemm", 0, 0})->size(), std::size_t{k_records});
  for (int i = 0; i < k_records; ++i) {
    auto got = store->get_failure(ids[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(got.ok()) << got.error().what();
    ASSERT_TRUE(got->inputs == record(i).inputs);
  }
  ASSERT_TRUE(store->put_failure(record(k_records)).ok());
}

TEST_F(StoreDurabilityTest, StorageFullAtMaxMapBytes) {
  StoreOptions options;
  options.initial_map_bytes = std::size_t{64} << 10;
  options.max_map_bytes = std::size_t{256} << 10;
  auto store = open(options);
  ASSERT_TRUE(store);
  std::vector<std::string> ids;
  Error last;
  for (int i = 0; i < 1000; ++i) {
    auto id = store->put_failure(make_record("conv", 1 + i, 4096, static_cast<std::uint64_t>(i)));
    if (!id.ok()) {
      last = id.error();
      break;
    }
    ids.push_back(*id);
  }
  EXPECT_EQ(last.code, ErrorCode::storage_full) << last.what();
  EXPECT_NE(last.message.find(m_dir), std::string::npos) << last.message;
  EXPECT_GT(ids.size(), 10u);
  EXPECT_LT(ids.size(), 64u);  // 256 KiB hold at most 64 pages
  EXPECT_EQ(store->stats()->map_bytes, options.max_map_bytes);
  // What was acknowledged is intact, and the store still reads and deletes.
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto got = store->get_failure(ids[i]);
    ASSERT_TRUE(got.ok()) << got.error().what();
    ASSERT_TRUE(got->inputs == random_bytes(4096, i));
  }
  EXPECT_EQ(store->list_failures({})->size(), ids.size());
  EXPECT_TRUE(store->delete_failure(ids[0]).ok());
}

TEST_F(StoreDurabilityTest, RefusesAnotherVersionAndLeavesItIntact) {
  {
    auto store = open();
    ASSERT_TRUE(store);
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(store->put_failure(make_record("add", 1 + i, 32, 1 + static_cast<std::uint64_t>(i))).ok());
  }
  { RawLmdb(m_dir).put("meta", "version", "2"); }
  auto refused = Store::open(m_dir);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::conflict);
  const std::string& message = refused.error().message;
  EXPECT_NE(message.find("version 2"), std::string::npos) << message;
  EXPECT_NE(message.find("version " + std::to_string(k_store_version)), std::string::npos)
      << message;
  EXPECT_NE(message.find(m_dir), std::string::npos) << message;
  {
    RawLmdb raw(m_dir);
    EXPECT_EQ(raw.get("meta", "version"), "2");  // never rewritten
    EXPECT_EQ(raw.entries("failures"), 3u);
    EXPECT_EQ(raw.entries("failures_idx"), 3u);
    raw.put("meta", "version", std::to_string(k_store_version));
  }
  auto store = open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->list_failures({})->size(), 3u);
}

TEST_F(StoreDurabilityTest, ReopenKeepsEverything) {
  std::string id;
  std::string created;
  {
    auto store = open();
    ASSERT_TRUE(store);
    auto put = store->put_failure(make_record("layer_norm", 777, 5000, 9));
    ASSERT_TRUE(put.ok());
    id = *put;
    ASSERT_TRUE(store->put_calibration("layer_norm", "bfloat16", {{"envelope", 2}}).ok());
    ASSERT_TRUE(store->put_baseline("b", {{"x", 1}}).ok());
    ASSERT_TRUE(store->put_run({{"op", "layer_norm"}}).ok());
    store.reset();
    created = RawLmdb(m_dir).get("meta", "created_ms");
  }
  auto store = open();
  ASSERT_TRUE(store);
  auto got = store->get_failure(id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->created_ms, 777);
  EXPECT_TRUE(got->inputs == random_bytes(5000, 9));
  EXPECT_TRUE(store->get_calibration("layer_norm", "bfloat16")->has_value());
  EXPECT_TRUE(store->get_baseline("b")->has_value());
  EXPECT_EQ(store->list_runs(0)->size(), 1u);
  store.reset();
  EXPECT_EQ(RawLmdb(m_dir).get("meta", "created_ms"), created);
}

TEST_F(StoreDurabilityTest, ConcurrentWritersAndListers) {
  StoreOptions options;
  options.initial_map_bytes = std::size_t{128} << 10;  // growth happens while others read
  auto store = open(options);
  ASSERT_TRUE(store);
  constexpr int k_writers = 4, k_per_writer = 200;
  std::atomic<int> writers_left{k_writers};
  std::atomic<int> errors{0};
  std::vector<std::vector<std::string>> written(k_writers);
  std::vector<std::thread> threads;
  for (int w = 0; w < k_writers; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < k_per_writer; ++i) {
        const auto seed = static_cast<std::uint64_t>(w * 1000 + i);
        auto id = store->put_failure(make_record("op" + std::to_string(w), 1 + i, 1024, seed));
        if (id.ok()) {
          written[static_cast<std::size_t>(w)].push_back(*id);
        } else {
          ADD_FAILURE() << id.error().what();
          ++errors;
        }
      }
      --writers_left;
    });
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::size_t last = 0;
      while (writers_left.load() > 0) {
        auto list = store->list_failures({r == 0 ? std::string() : "op1", 0, 0});
        if (!list.ok()) {
          ADD_FAILURE() << list.error().what();
          ++errors;
          return;
        }
        for (std::size_t i = 1; i < list->size(); ++i)
          if ((*list)[i - 1].created_ms < (*list)[i].created_ms) ++errors;
        if (r == 0 && list->size() < last) ++errors;  // records never disappear
        last = list->size();
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // share the cores
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  auto all = store->list_failures({});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), std::size_t{k_writers * k_per_writer});
  std::set<std::string> listed;
  for (const auto& s : *all) listed.insert(s.id);
  for (const auto& ids : written)
    for (const auto& id : ids) EXPECT_TRUE(listed.count(id)) << id;
  EXPECT_EQ(store->list_failures({"op2", 0, 0})->size(), std::size_t{k_per_writer});
}

TEST_F(StoreDurabilityTest, SigkilledWriterLosesNoAcknowledgedRecord) {
  { ASSERT_TRUE(open()); }  // create the store before forking; no Store is open across fork()
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    auto store = Store::open(m_dir);
    if (!store.ok()) _exit(2);
    for (std::uint64_t i = 0;; ++i) {
      auto id = (*store)->put_failure(make_record("child", 0, 2048, i));
      if (!id.ok()) _exit(3);
      const std::string line = *id + "\n";
      if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(4);
    }
  }
  close(fds[1]);
  std::string received;
  bool killed = false;
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    if (poll(&pfd, 1, 30'000) <= 0) break;  // the child stalled: fail below
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // the child is gone
    received.append(buf, static_cast<std::size_t>(n));
    if (!killed && std::count(received.begin(), received.end(), '\n') >= 60) {
      kill(child, SIGKILL);  // mid-loop: most likely inside a put
      killed = true;
    }
  }
  close(fds[0]);
  if (!killed) kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(killed) << "child exited early, status " << status;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  std::vector<std::string> acknowledged;
  for (std::size_t start = 0, end; (end = received.find('\n', start)) != std::string::npos;
       start = end + 1)
    acknowledged.push_back(received.substr(start, end - start));
  ASSERT_GE(acknowledged.size(), 60u);

  auto store = open();
  ASSERT_TRUE(store);
  for (std::size_t i = 0; i < acknowledged.size(); ++i) {
    auto got = store->get_failure(acknowledged[i]);
    ASSERT_TRUE(got.ok()) << acknowledged[i] << ": " << got.error().what();
    EXPECT_TRUE(got->inputs == random_bytes(2048, i));
  }
  EXPECT_GE(store->list_failures({"child", 0, 0})->size(), acknowledged.size());
  ASSERT_TRUE(store->put_failure(make_record("after", 1, 16, 1)).ok());  // writable again
}

}  // namespace
}  // namespace gpuemu::store_test
