// gpuemu ci's shard plan (cli/ci_shard.hpp): every case of every unit dealt exactly once, the
// shards' expected costs within one piece of each other, the same plan from the same inputs.
#include "ci_shard.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace gpuemu::cli {
namespace {

TEST(CiShard, EveryCaseOnceAndTheShardsBalancedByCost) {
  // Costs as different as the catalogue's: a small elementwise op, softmax, a large GEMM.
  const std::vector<ShardUnit> units = {{0, "float32", 100, 1e3},  {0, "float16", 100, 1e3},
                                        {1, "float32", 40, 2.6e5}, {2, "bfloat16", 7, 4e6},
                                        {3, "float32", 1000, 10.0}};
  for (int count : {1, 2, 3, 5, 8, 64}) {
    const auto plan = plan_shards(units, count);
    std::map<std::size_t, std::vector<int>> hits;
    std::vector<double> load(static_cast<std::size_t>(count), 0.0);
    double largest = 0;
    for (const auto& p : plan) {
      ASSERT_GE(p.shard, 0);
      ASSERT_LT(p.shard, count);
      auto& h = hits[p.unit];
      h.resize(static_cast<std::size_t>(units[p.unit].cases), 0);
      for (auto c = p.start; c < p.end; ++c) ++h[static_cast<std::size_t>(c)];
      const double cost = static_cast<double>(p.end - p.start) * units[p.unit].case_cost;
      load[static_cast<std::size_t>(p.shard)] += cost;
      largest = std::max(largest, cost);
      // a unit is cut into at most `count` pieces of at least k_min_piece_cases (or one)
      EXPECT_TRUE(p.end - p.start >= k_min_piece_cases || p.end - p.start == units[p.unit].cases)
          << p.unit << " [" << p.start << ", " << p.end << ")";
    }
    for (std::size_t u = 0; u < units.size(); ++u)
      for (int n : hits[u]) ASSERT_EQ(n, 1) << "unit " << u << " with " << count << " shards";
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    if (static_cast<std::size_t>(count) <= plan.size()) {  // else some shards have nothing to do
      EXPECT_LE(*hi - *lo, largest + 1e-9) << count << " shards";
    }
    // deterministic: the same inputs give the same plan and digest
    const auto again = plan_shards(units, count);
    ASSERT_EQ(again.size(), plan.size());
    for (std::size_t i = 0; i < plan.size(); ++i)
      EXPECT_TRUE(again[i].shard == plan[i].shard && again[i].start == plan[i].start &&
                  again[i].unit == plan[i].unit);
    EXPECT_EQ(plan_digest(units, count), plan_digest(units, count));
  }
  EXPECT_NE(plan_digest(units, 3), plan_digest(units, 4));
  auto other = units;
  other[2].cases = 41;
  EXPECT_NE(plan_digest(units, 3), plan_digest(other, 3));
}

TEST(CiShard, IndexAndCountFromEachEnginesEnvironment) {
  const auto auto_ = [](std::map<std::string, std::string> env, std::optional<int> count = {}) {
    return parse_shard("auto", count, env);
  };
  auto g = auto_({{"GPUEMU_SHARD_INDEX", "3"}, {"GPUEMU_SHARD_COUNT", "4"}});
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->index, 3);
  EXPECT_EQ(g->count, 4);
  auto s = auto_({{"SLURM_ARRAY_TASK_ID", "8"}, {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_COUNT", "8"}});
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->index, 7);
  auto k = auto_({{"JOB_COMPLETION_INDEX", "0"}}, 5);
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(k->count, 5);
  EXPECT_FALSE(auto_({{"JOB_COMPLETION_INDEX", "0"}}).ok());
  EXPECT_FALSE(auto_({{"SLURM_ARRAY_TASK_ID", "9"}, {"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_COUNT", "8"}}).ok());
  EXPECT_FALSE(auto_({{"GPUEMU_SHARD_INDEX", "-1"}, {"GPUEMU_SHARD_COUNT", "4"}}).ok());
  EXPECT_FALSE(auto_({}).ok());
  EXPECT_TRUE(parse_shard("0/1", {}, {}).ok());
  for (const char* bad : {"1/1", "a/2", "1/", "/2", "2", "1/0", "-1/2", "1/2/3"})
    EXPECT_FALSE(parse_shard(bad, {}, {}).ok()) << bad;
}

}  // namespace
}  // namespace gpuemu::cli
