#include "report_stats.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpuemu::cli {
namespace {

using Json = nlohmann::json;

struct Tally {
  std::int64_t runs = 0, cases = 0, passed = 0;
};

Json rows_of(const std::map<std::pair<std::string, std::string>, Tally>& tally) {
  Json out = Json::array();
  for (const auto& [key, t] : tally)
    out.push_back(
        {{"op", key.first},
         {"dtype", key.second},
         {"runs", t.runs},
         {"cases", t.cases},
         {"passed", t.passed},
         {"rate", t.cases ? static_cast<double>(t.passed) / static_cast<double>(t.cases) : 0.0}});
  return out;
}

std::int64_t int_of(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

std::string kernel_label(const Json& kernel) {
  if (!kernel.is_object()) return "";
  std::string label = kernel.value("name", kernel.value("kind", std::string()));
  if (kernel.contains("file") && kernel["file"].is_string())
    label =
        std::filesystem::path(kernel["file"].get<std::string>()).filename().string() + ":" + label;
  return label;
}

}  // namespace

Json join_backward_parts(const Json& runs) {
  // The gradients' records by the forward run they belong to.
  std::map<std::string, std::vector<const Json*>> gradients;
  for (const auto& run : runs) {
    if (!run.is_object() || !run.contains("part_of") || !run["part_of"].is_object()) continue;
    const Json& part = run["part_of"];
    if (part.value("part", "") == "gradients" && part.contains("run") && part["run"].is_string())
      gradients[part["run"].get<std::string>()].push_back(&run);
  }
  Json out = Json::array();
  for (const auto& run : runs) {
    const bool forward = run.is_object() && run.contains("part_of") && run["part_of"].is_object() &&
                         run["part_of"].value("part", "") == "forward" &&
                         run["part_of"].contains("run") && run["part_of"]["run"].is_string();
    const auto found =
        forward ? gradients.find(run["part_of"]["run"].get<std::string>()) : gradients.end();
    if (found == gradients.end()) {
      out.push_back(run);
      continue;
    }
    Json joined = run;
    const std::int64_t first = int_of(run, "first_index"), total = int_of(run, "total");
    // Case index -> dtype of every failing case in this record's range, forward or gradients.
    std::map<std::int64_t, std::string> failed;
    std::map<std::int64_t, bool> forward_failed;
    for (const auto& f : run.value("failed_cases", Json::array())) {
      const std::int64_t i = int_of(f, "index");
      if (i < first || i >= first + total) continue;
      failed.emplace(i, f.value("dtype", ""));
      forward_failed[i] = true;
    }
    // The gradients' cases in this record's range (the two parts' submissions need not split the
    // run at the same indices: each gradients record counts by its overlap with the range).
    std::int64_t g_total = 0;
    Json ids = run.value("failure_ids", Json::array());
    for (const Json* g : found->second) {
      const std::int64_t gf = int_of(*g, "first_index"), gt = int_of(*g, "total");
      const std::int64_t overlap = std::min(first + total, gf + gt) - std::max(first, gf);
      if (overlap <= 0) continue;  // another part of the run
      g_total += overlap;
      if (gf >= first && gf + gt <= first + total)
        for (const auto& id : g->value("failure_ids", Json::array())) ids.push_back(id);
    }
    std::int64_t g_failed = 0;
    for (const Json* g : found->second)
      for (const auto& f : g->value("failed_cases", Json::array())) {
        const std::int64_t i = int_of(f, "index");
        if (i < first || i >= first + total) continue;
        ++g_failed;
        failed.emplace(i, f.value("dtype", ""));
      }
    const std::int64_t g_passed = g_total - g_failed;
    const std::int64_t fwd_passed = int_of(run, "passed");
    joined["forward"] = {{"total", total}, {"passed", fwd_passed}};
    joined["gradients"] = {{"op", run["part_of"].value("gradients_op", "")},
                           {"run", run["part_of"]["run"]},
                           {"total", g_total},
                           {"passed", g_passed},
                           {"failed", g_total - g_passed}};
    joined["backward"] = true;
    // An older forward record without failed_cases: its failures count at least once.
    const std::int64_t n_failed =
        std::max<std::int64_t>(static_cast<std::int64_t>(failed.size()), total - fwd_passed);
    joined["passed"] = total - n_failed;
    if (!failed.empty()) {
      const std::int64_t f0 = failed.begin()->first;
      const std::int64_t ff = run.contains("first_failure") && run["first_failure"].is_number_integer()
                                  ? run["first_failure"].get<std::int64_t>()
                                  : -1;
      joined["first_failure"] = ff >= 0 ? std::min(ff, f0) : f0;
    }
    if (joined.contains("by_dtype") && joined["by_dtype"].is_object())
      for (const auto& [i, dtype] : failed) {
        if (forward_failed.count(i)) continue;  // counted already
        auto d = joined["by_dtype"].find(dtype);
        if (d != joined["by_dtype"].end() && int_of(*d, "passed") > 0)
          (*d)["passed"] = int_of(*d, "passed") - 1;
      }
    joined["failure_ids"] = ids;
    out.push_back(std::move(joined));
  }
  return out;
}

Json pass_rates_from_runs(const Json& runs) {
  std::map<std::pair<std::string, std::string>, Tally> tally;
  for (const auto& run : runs) {
    if (!run.is_object()) continue;
    const std::string op = run.value("op", "");
    const auto by = run.find("by_dtype");
    if (by != run.end() && by->is_object() && !by->empty()) {
      for (const auto& [dtype, counts] : by->items()) {
        Tally& t = tally[{op, dtype}];
        ++t.runs;
        t.cases += int_of(counts, "total");
        t.passed += int_of(counts, "passed");
      }
    } else {
      Tally& t = tally[{op, "*"}];
      ++t.runs;
      t.cases += int_of(run, "total");
      t.passed += int_of(run, "passed");
    }
  }
  return rows_of(tally);
}

Json pass_rates_from_results(const Json& results) {
  std::map<std::pair<std::string, std::string>, Tally> tally;
  for (const auto& r : results) {
    if (!r.is_object() || !r.contains("cases")) continue;
    Tally& t = tally[{r.value("op", ""), r.value("dtype", "")}];
    ++t.runs;
    t.cases += int_of(r, "cases");
    t.passed += int_of(r, "cases") - int_of(r, "failed_cases");
  }
  return rows_of(tally);
}

Json first_failures_from_runs(const Json& runs) {
  Json out = Json::array();
  for (const auto& run : runs) {
    if (!run.is_object()) continue;
    const std::int64_t first =
        run.contains("first_failure") && run["first_failure"].is_number_integer()
            ? run["first_failure"].get<std::int64_t>()
            : -1;
    if (first < 0) continue;
    out.push_back({{"id", run.value("id", Json())},
                   {"time_ms", run.value("started_ms", run.value("time_ms", Json()))},
                   {"op", run.value("op", Json())},
                   {"kernel", kernel_label(run.value("kernel", Json()))},
                   {"total", run.value("total", Json())},
                   {"first_failure", first},
                   {"cases_to_first_failure", first + 1}});
  }
  return out;
}

Json first_failures_from_results(const Json& results) {
  Json out = Json::array();
  for (const auto& r : results) {
    if (!r.is_object() || !r.contains("failure")) continue;
    const Json& f = r["failure"];
    if (!f.contains("index") || !f["index"].is_number_integer()) continue;
    const std::int64_t first = f["index"].get<std::int64_t>();
    out.push_back({{"id", r.value("run_id", Json())},
                   {"time_ms", Json()},
                   {"op", r.value("op", Json())},
                   {"dtype", r.value("dtype", Json())},
                   {"kernel", r.value("kernel", Json())},
                   {"total", r.value("cases", Json())},
                   {"first_failure", first},
                   {"cases_to_first_failure", first + 1}});
  }
  return out;
}

}  // namespace gpuemu::cli
