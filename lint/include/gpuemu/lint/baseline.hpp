// A lint baseline: the metrics of every kernel at one point in time, as one JSON value. Baselines
// are meant to be committed next to the kernels they describe (`--save-baseline`), and the same
// JSON value is what the daemon stores under a tag. The `--json` report of a run is also accepted
// as a baseline: both carry the metrics under "kernels".
//
//   {"format": "gpuemu-lint-baseline", "version": 1, "toolkit": "13.0.88",
//    "kernels": [{"name": ..., "arch": ..., "registers": ..., ...}, ...]}
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/lint/metrics.hpp"

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace gpuemu::lint {

inline constexpr int k_baseline_version = 1;
inline constexpr const char* k_baseline_format = "gpuemu-lint-baseline";
// The `--json` report, also accepted where a baseline is expected.
inline constexpr const char* k_report_format = "gpuemu-lint-report";

struct Baseline {
  std::string toolkit;  // CUDA compiler version that produced the metrics ("" when unknown)
  std::vector<KernelMetrics> kernels;
};

// Throwing conversions for nlohmann's ADL (json.get<Baseline>()); prefer baseline_from_json.
void to_json(nlohmann::json& j, const Baseline& baseline);
void from_json(const nlohmann::json& j, Baseline& baseline);

// Validates and converts; a malformed value is an invalid_argument error naming what is wrong.
Result<Baseline> baseline_from_json(const nlohmann::json& j);
// Reads a baseline file: not_found when absent, invalid_argument when it is not a baseline.
Result<Baseline> load_baseline(const std::filesystem::path& path);
// Writes the baseline as indented JSON (atomically: a temp file renamed over the target).
Status save_baseline(const Baseline& baseline, const std::filesystem::path& path);

}  // namespace gpuemu::lint
