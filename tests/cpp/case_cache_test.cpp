// The daemon's case cache (daemon/server/case_cache.hpp): a kept case and its reference judge an
// output exactly as a regenerated case does, the memory bound holds, least recently used out first,
// and the background thread and a submission computing the same reference meet once.
#include "server/case_cache.hpp"

#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/verdict.hpp"
#include "source_engine.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <thread>

using gpuemu::server::CaseCache;
using namespace gpuemu;

namespace {

Engine& engine() { return testing_support::source_engine(); }

TestCase make_case(const std::string& op, std::int64_t index, FuzzOptions options = {}) {
  const OpSchema* schema = engine().catalogue().get(op).value();
  CaseGenerator gen(*schema, options);
  return gen.generate(77, index).value();
}

std::vector<Tensor> run(const std::string& op, const std::string& kernel, const TestCase& c) {
  return engine().builtin_kernel(op, kernel).value()(c).value();
}

}  // namespace

TEST(CaseCache, KeptCasesJudgeExactlyAsRegeneratedOnes) {
  CaseCache cache(std::size_t{256} << 20);
  const OpSchema* schema = engine().catalogue().get("softmax").value();
  for (std::int64_t i = 0; i < 12; ++i) {
    const TestCase c = make_case("softmax", i);
    const std::string key = CaseCache::key("softmax", "{}", 77, i);
    cache.put(key, c, engine().catalogue_ptr(), schema);
    auto kept = cache.find(key);
    ASSERT_TRUE(kept);
    EXPECT_EQ(kept->test_case().seed, c.seed);
    const auto& prepared = cache.prepared(*kept);
    ASSERT_TRUE(prepared.ok());
    // A correct control and a bug, judged from the kept reference and by the engine from scratch.
    for (const char* kernel : {"fp32_two_pass", "tail_leak"}) {
      const auto outs = run("softmax", kernel, c);
      const Verdict a = judge(kept->schema(), prepared->ctx, prepared->reference, outs,
                              engine().envelopes().get("softmax", c.dtype), &prepared->rounded);
      const Verdict b = engine().judge_case(c, outs).value();
      EXPECT_EQ(a.passed, b.passed) << kernel << " case " << i;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(a.max_error), std::bit_cast<std::uint64_t>(b.max_error))
          << kernel << " case " << i;
      EXPECT_EQ(a.message, b.message);
    }
  }
  EXPECT_EQ(cache.hits(), 12);
  EXPECT_EQ(cache.find(CaseCache::key("softmax", "{}", 78, 0)), nullptr);  // another master seed
  EXPECT_EQ(cache.misses(), 1);
}

TEST(CaseCache, StaysUnderItsLimitLeastRecentlyUsedOutFirst) {
  const OpSchema* schema = engine().catalogue().get("layer_norm").value();
  FuzzOptions options;
  options.dims = {{"R", {64}}, {"N", {1024}}};  // 64 Ki float32 elements: 256 KiB of x
  options.dtypes = {DType::float32};
  options.layouts = false;
  const TestCase c = make_case("layer_norm", 0, options);
  std::size_t one = 0;  // what a kept case counts before its reference: its inputs' storage
  for (const auto& [name, t] : c.inputs) one += t.storage_bytes();
  ASSERT_GE(one, std::size_t{256} << 10);
  CaseCache cache(4 * one + one / 2, /*background=*/false);
  for (int i = 0; i < 4; ++i) cache.put("k" + std::to_string(i), c, engine().catalogue_ptr(), schema);
  EXPECT_EQ(cache.size(), 4u);
  ASSERT_TRUE(cache.find("k0"));  // k0 is now the most recent
  cache.put("k4", c, engine().catalogue_ptr(), schema);
  EXPECT_LE(cache.bytes(), cache.limit_bytes());
  EXPECT_FALSE(cache.find("k1"));  // the least recently used went
  EXPECT_TRUE(cache.find("k0"));
  EXPECT_TRUE(cache.find("k4"));
  // A reference counts too: preparing one pushes older cases out, never the most recent one (kept
  // even alone over the limit: it is the case about to be submitted).
  auto e = cache.find("k4");
  const std::size_t before = cache.bytes();
  ASSERT_TRUE(cache.prepared(*e).ok());
  EXPECT_TRUE(cache.find("k4"));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_GT(cache.bytes(), before / 4);  // k4's inputs and reference
  // An evicted entry a submission still holds stays usable.
  auto held = cache.find("k4");
  for (int i = 5; i < 12; ++i) cache.put("k" + std::to_string(i), c, engine().catalogue_ptr(), schema);
  EXPECT_FALSE(cache.find("k4"));
  EXPECT_TRUE(cache.prepared(*held).ok());
  EXPECT_LE(cache.bytes(), cache.limit_bytes());  // the evicted k4 no longer counts
  cache.erase("k11");
  EXPECT_FALSE(cache.find("k11"));
  // Nothing is kept with a limit of 0.
  CaseCache off(0);
  off.put("k", c, engine().catalogue_ptr(), schema);
  EXPECT_EQ(off.size(), 0u);
}

TEST(CaseCache, BackgroundAndSubmissionComputeEachReferenceOnce) {
  CaseCache cache(std::size_t{512} << 20);
  const OpSchema* schema = engine().catalogue().get("flash_attention").value();
  std::vector<std::string> keys;
  for (std::int64_t i = 0; i < 8; ++i) {
    keys.push_back(CaseCache::key("flash_attention", "{}", 77, i));
    cache.put(keys.back(), make_case("flash_attention", i), engine().catalogue_ptr(), schema);
  }
  // Two submitting threads race the background thread for the same entries.
  auto submit = [&] {
    for (const auto& k : keys) {
      auto e = cache.find(k);
      ASSERT_TRUE(e);
      const auto& p = cache.prepared(*e);
      ASSERT_TRUE(p.ok());
      EXPECT_EQ(p->reference.size(), 1u);
    }
  };
  std::thread a(submit), b(submit);
  a.join();
  b.join();
  for (const auto& k : keys) {
    auto e = cache.find(k);
    const auto& p1 = cache.prepared(*e);
    const auto& p2 = cache.prepared(*e);
    EXPECT_EQ(&p1, &p2);  // computed once, kept
    const auto ref = run_reference(*schema, p1->ctx).value();
    ASSERT_EQ(ref[0].value.size(), p1->reference[0].value.size());
    for (std::size_t j = 0; j < ref[0].value.size(); ++j)
      ASSERT_EQ(std::bit_cast<std::uint64_t>(ref[0].value[j]),
                std::bit_cast<std::uint64_t>(p1->reference[0].value[j]));
  }
}

TEST(CaseCache, AnIdleDaemonDropsTheCasesNobodyCameBackFor) {
  CaseCache cache(std::size_t{64} << 20, /*background=*/false);
  const OpSchema* schema = engine().catalogue().get("softmax").value();
  const TestCase c = make_case("softmax", 0);
  cache.put("old", c, engine().catalogue_ptr(), schema);
  cache.put("touched", c, engine().catalogue_ptr(), schema);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  ASSERT_TRUE(cache.find("touched"));
  cache.put("new", c, engine().catalogue_ptr(), schema);
  EXPECT_EQ(cache.drop_unused(std::chrono::milliseconds(40)), 1u);
  EXPECT_FALSE(cache.find("old"));
  EXPECT_TRUE(cache.find("touched"));
  EXPECT_TRUE(cache.find("new"));
  EXPECT_EQ(cache.drop_unused(std::chrono::seconds(0)), 2u);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}
