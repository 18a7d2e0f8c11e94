#include "ci_shard.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace gpuemu::cli {
namespace {

Result<long long> integer(const std::string& what, const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 9)
    return make_error(ErrorCode::invalid_argument,
                      what + " must be a non-negative integer, not '" + text + "'");
  return std::stoll(text);
}

Result<ShardSpec> checked(long long index, long long count, const std::string& where) {
  if (count < 1 || count > 100000)
    return make_error(ErrorCode::invalid_argument,
                      "the shard count must be in [1, 100000] (" + where + ")");
  if (index < 0 || index >= count)
    return make_error(ErrorCode::invalid_argument,
                      "shard index " + std::to_string(index) + " is not in [0, " +
                          std::to_string(count) + ") (" + where + ")");
  return ShardSpec{static_cast<int>(index), static_cast<int>(count)};
}

}  // namespace

Result<ShardSpec> parse_shard(const std::string& spec, std::optional<int> count_option,
                              const std::map<std::string, std::string>& env) {
  auto get = [&](const char* k) -> std::string {
    auto it = env.find(k);
    return it == env.end() ? "" : it->second;
  };
  if (spec != "auto") {
    const auto slash = spec.find('/');
    if (slash == std::string::npos)
      return make_error(ErrorCode::invalid_argument,
                        "--shard takes I/N (0 <= I < N) or auto, not '" + spec + "'");
    GPUEMU_TRY(long long i, integer("the shard index of --shard", spec.substr(0, slash)));
    GPUEMU_TRY(long long n, integer("the shard count of --shard", spec.substr(slash + 1)));
    if (count_option && *count_option != n)
      return make_error(ErrorCode::invalid_argument,
                        "--shard " + spec + " and --shard-count " + std::to_string(*count_option) +
                            " disagree");
    return checked(i, n, "--shard " + spec);
  }
  // Each engine's variables, in the order they are looked for. `min`: the first index (a Slurm
  // array of --array=1-8 numbers its tasks 1..8; a stepped one, --array=0-15:2, needs --shard
  // I/N). The count: --shard-count, else `count`; `missing` says what to set when neither is.
  struct Source {
    const char* index;
    const char* min;
    const char* count;
    const char* missing;
  };
  static constexpr Source sources[] = {
      {"GPUEMU_SHARD_INDEX", nullptr, "GPUEMU_SHARD_COUNT",
       "GPUEMU_SHARD_INDEX is set but not GPUEMU_SHARD_COUNT (or --shard-count)"},
      {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT",
       "SLURM_ARRAY_TASK_ID is set but not SLURM_ARRAY_TASK_COUNT (or --shard-count)"},
      {"JOB_COMPLETION_INDEX", nullptr, "GPUEMU_SHARD_COUNT",
       "JOB_COMPLETION_INDEX is set: give the Job's completions as --shard-count N (or "
       "GPUEMU_SHARD_COUNT)"},
  };
  for (const Source& src : sources) {
    if (get(src.index).empty()) continue;
    GPUEMU_TRY(long long i, integer(src.index, get(src.index)));
    long long min = 0;
    if (src.min != nullptr && !get(src.min).empty()) {
      GPUEMU_TRY(min, integer(src.min, get(src.min)));
    }
    long long n = 0;
    if (count_option) {
      n = *count_option;
    } else if (get(src.count).empty()) {
      return make_error(ErrorCode::invalid_argument, src.missing);
    } else {
      GPUEMU_TRY(n, integer(src.count, get(src.count)));
    }
    std::string where = std::string(src.index) + (src.min ? std::string(" - ") + src.min : "") +
                        " / " + (count_option ? "--shard-count" : src.count);
    return checked(i - min, n, where);
  }
  return make_error(ErrorCode::invalid_argument,
                    "--shard auto found no shard in the environment (GPUEMU_SHARD_INDEX and "
                    "GPUEMU_SHARD_COUNT, SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT, or "
                    "JOB_COMPLETION_INDEX with --shard-count); docs/ci.md, \"Sharding\"");
}

std::map<std::string, std::string> shard_environment() {
  std::map<std::string, std::string> env;
  for (const char* k : {"GPUEMU_SHARD_INDEX", "GPUEMU_SHARD_COUNT", "SLURM_ARRAY_TASK_ID",
                        "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT", "JOB_COMPLETION_INDEX"})
    if (const char* v = std::getenv(k); v != nullptr && *v != '\0') env[k] = v;
  return env;
}

std::vector<ShardPiece> plan_shards(const std::vector<ShardUnit>& units, int count) {
  std::vector<ShardPiece> pieces;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const std::int64_t n = units[u].cases;
    if (n <= 0) continue;
    const std::int64_t k = std::max<std::int64_t>(1, std::min<std::int64_t>(count, n / k_min_piece_cases));
    for (std::int64_t p = 0; p < k; ++p) pieces.push_back({u, n * p / k, n * (p + 1) / k, 0});
  }
  auto cost = [&](const ShardPiece& p) {
    return static_cast<double>(p.end - p.start) * units[p.unit].case_cost;
  };
  std::vector<std::size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cost(pieces[a]) > cost(pieces[b]); });
  std::vector<double> load(static_cast<std::size_t>(count), 0.0);
  for (std::size_t i : order) {
    const auto least = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    pieces[i].shard = static_cast<int>(least);
    load[least] += cost(pieces[i]);
  }
  return pieces;
}

std::string plan_digest(const std::vector<ShardUnit>& units, int count) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over a canonical text of the plan's inputs
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  mix(std::to_string(count));
  for (const auto& u : units) {
    char cost[64];
    std::snprintf(cost, sizeof cost, "%.17g", u.case_cost);
    mix("|" + std::to_string(u.entry) + "," + u.dtype + "," + std::to_string(u.cases) + "," + cost);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace gpuemu::cli
