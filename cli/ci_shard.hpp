// Sharding `gpuemu ci` (docs/ci.md, "Sharding"): the work of a gpuemu.toml, every [[op]] x dtype
// with its cases [0, iterations) of one seed, split into pieces and dealt to N shards, so that the
// engines teams already run (a CI matrix, a Slurm array, a Kubernetes indexed Job) spread it. Every
// shard computes the same plan from the same config, and the union of the shards' pieces is
// exactly the unsharded run: the same cases (same seed, same indices), so the same verdicts.
#pragma once

#include <gpuemu/base/error.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::cli {

struct ShardSpec {
  int index = 0;  // 0-based
  int count = 1;
};

// "I/N" (I in [0, N)), or "auto": the index and count from the environment, the first of
//   GPUEMU_SHARD_INDEX / GPUEMU_SHARD_COUNT (a GitHub Actions matrix sets them from
//     ${{ strategy.job-index }} and ${{ strategy.job-total }}),
//   SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN / SLURM_ARRAY_TASK_COUNT (a Slurm job array),
//   JOB_COMPLETION_INDEX / `count_option` or GPUEMU_SHARD_COUNT (a Kubernetes indexed Job).
// `env` reads a variable (std::getenv in the CLI; a map in tests).
Result<ShardSpec> parse_shard(const std::string& spec, std::optional<int> count_option,
                              const std::map<std::string, std::string>& env);
std::map<std::string, std::string> shard_environment();  // the variables above, as set now

// One unit of work: an [[op]] entry (its position in the file) x dtype, `cases` cases, each of
// expected cost `case_cost` (the op's largest case, in elements: what generating, running and
// judging a case grows with).
struct ShardUnit {
  std::size_t entry = 0;
  std::string dtype;
  std::int64_t cases = 0;
  double case_cost = 1.0;
};

// A unit's cases [start, end), dealt to `shard`.
struct ShardPiece {
  std::size_t unit = 0;
  std::int64_t start = 0, end = 0;
  int shard = 0;
};

// Every unit is cut into min(count, max(1, cases / k_min_piece_cases)) near-equal pieces (so a
// piece holds at least k_min_piece_cases cases, or is the whole unit), and the
// pieces are dealt largest first to the least loaded shard (ties: the lower shard; the order of
// equal pieces: unit, then start), so a shard's expected cost is within one piece of the others'.
// Deterministic: the same units and count give the same plan on every machine.
inline constexpr std::int64_t k_min_piece_cases = 16;
std::vector<ShardPiece> plan_shards(const std::vector<ShardUnit>& units, int count);

// A digest of the plan's inputs (units and count): shards of one run agree on it, and
// `gpuemu report merge` refuses to combine shards of different plans.
std::string plan_digest(const std::vector<ShardUnit>& units, int count);

}  // namespace gpuemu::cli
