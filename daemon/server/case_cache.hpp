// The cases a get_test_batch handed out, kept for the submit_outputs that judges them.
//
// A client-side run fetches a chunk of cases, runs its kernel on them and submits the outputs.
// Without this the daemon generated every case twice (once to hand it out, once again from its seed
// to judge it: the daemon never trusts inputs a client sends back) and computed each reference only
// once the outputs had arrived, while the client waited. Now a handed-out case is kept, and a
// background thread computes its fp64 reference (the RefContext, the reference with its condition
// terms, the reference rounded to the output dtype) while the client runs its kernel: a submission
// finds both ready and only judges. What is kept is exactly what regeneration would give (the same
// generator, options and seed), and the envelope is the submitting request's, so verdicts are
// unchanged; a miss (evicted, another daemon's case, a custom op) regenerates as before.
//
// Bounded in bytes (inputs, and references once computed), least recently used out first. Only
// cases of the daemon's own catalogue are kept (a request with a custom_op builds its own).
#pragma once

#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/op.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gpuemu::server {

class CaseCache {
 public:
  // A kept case's reference, as Engine::judge_case would compute it.
  struct Prepared {
    RefContext ctx;
    std::vector<RefOutput> reference;
    std::vector<std::vector<double>> rounded;  // rounded_reference(reference)
  };

  class Entry {
   public:
    const TestCase& test_case() const { return m_case; }
    const OpSchema& schema() const { return *m_schema; }

   private:
    friend class CaseCache;
    TestCase m_case;
    std::shared_ptr<const Catalogue> m_catalogue;  // keeps m_schema alive
    const OpSchema* m_schema = nullptr;
    std::mutex m_mu;                                // held while the reference is computed
    std::optional<Result<Prepared>> m_prepared;
    std::size_t m_bytes = 0;
    bool m_kept = false;  // in the map (guarded by the cache's mutex)
    std::chrono::steady_clock::time_point m_used;  // last put or find (guarded likewise)
  };

  // Keeps at most `limit_bytes` (0: nothing is kept); `background`: compute references on a thread
  // of their own as cases come in (else on first use).
  explicit CaseCache(std::size_t limit_bytes, bool background = true);
  ~CaseCache();
  CaseCache(const CaseCache&) = delete;
  CaseCache& operator=(const CaseCache&) = delete;

  // The key of case `index` under `master_seed` of `op` generated with `options_json` (the options
  // as protocol::options_to_json writes them).
  static std::string key(const std::string& op, const std::string& options_json,
                         std::uint64_t master_seed, std::int64_t index);

  void put(const std::string& key, const TestCase& c, std::shared_ptr<const Catalogue> catalogue,
           const OpSchema* schema);
  std::shared_ptr<Entry> find(const std::string& key);
  // The entry under `key` if kept, without counting a hit or a miss (hand_out looks for a case the
  // background thread generated ahead: prefetch).
  std::shared_ptr<Entry> peek(const std::string& key) const;
  // Runs `job` on the background thread, after the references queued before it (without a
  // background thread: not at all). The next chunk of a client-side run is generated there while
  // the client runs its kernel on this one.
  void post(std::function<void()> job);
  void erase(const std::string& key);
  // The entry's reference: computed now if the background thread has not done it yet (a caller
  // that arrives while it runs waits for it).
  const Result<Prepared>& prepared(Entry& entry);

  // Drops the cases not fetched or found for `age` (their client went away, or never submits):
  // what an idle daemon gives back. Returns how many went.
  std::size_t drop_unused(std::chrono::steady_clock::duration age);

  std::size_t limit_bytes() const { return m_limit; }
  std::size_t bytes() const;
  std::size_t size() const;
  // Cases found / not found by find(), since the start.
  std::int64_t hits() const;
  std::int64_t misses() const;

 private:
  struct Slot {
    std::shared_ptr<Entry> entry;
    std::list<std::string>::iterator lru;  // position in m_lru (front: most recent)
  };
  void evict_locked();
  void worker();

  const std::size_t m_limit;
  mutable std::mutex m_mu;
  std::unordered_map<std::string, Slot> m_map;
  std::list<std::string> m_lru;
  std::size_t m_bytes = 0;
  std::int64_t m_hits = 0, m_misses = 0;

  // The background thread's queue: entries whose reference is still to compute, and posted jobs.
  std::condition_variable m_cv;
  std::deque<std::function<void()>> m_queue;
  bool m_stop = false;
  std::thread m_thread;
};

}  // namespace gpuemu::server
