#include "report_stats.hpp"

#include <filesystem>
#include <map>
#include <string>
#include <utility>

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
