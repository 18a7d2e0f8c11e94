#include "lsp/failure_index.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace gpuemu::lsp {
namespace {

std::string string_or_empty(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::int64_t int_of(const Json& j, const char* key, std::int64_t fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : fallback;
}

struct Run {
  std::string id, key, op, kind, seed;
  std::int64_t started_ms = 0, first_index = 0, total = 0, passed = 0;
  std::vector<std::string> dtypes;  // empty: every dtype
  const Json* json = nullptr;
};

Run run_of(const Json& r) {
  Run run;
  run.json = &r;
  run.id = string_or_empty(r, "id");
  run.key = kernel_key(r.value("kernel", Json::object()));
  run.op = string_or_empty(r, "op");
  run.kind = string_or_empty(r, "kind");
  run.seed = r.contains("seed") && !r["seed"].is_null() ? r["seed"].dump() : "";
  run.started_ms = int_of(r, "started_ms", 0);
  run.first_index = int_of(r, "first_index", 0);
  run.total = int_of(r, "total", 0);
  run.passed = int_of(r, "passed", 0);
  if (r.contains("dtypes") && r["dtypes"].is_array())
    for (const auto& d : r["dtypes"])
      if (d.is_string()) run.dtypes.push_back(d.get<std::string>());
  return run;
}

bool covers(const Run& r, const std::string& dtype) {
  return r.dtypes.empty() || std::find(r.dtypes.begin(), r.dtypes.end(), dtype) != r.dtypes.end();
}

// Whether `later` (recorded after the failure) starts a new session relative to `found_in` (the
// run that stored the failure; nullptr when none did: a minimized case, or an unrecorded run).
bool new_session(const Run& later, const Run* found_in) {
  if (found_in == nullptr) return true;
  if (later.id == found_in->id) return false;
  if (later.kind != "client" || found_in->kind != "client") return true;
  if (later.seed.empty() || later.seed != found_in->seed) return true;
  return later.first_index <= found_in->first_index;  // the same seed, started over
}

}  // namespace

std::string kernel_key(const Json& kernel) {
  if (!kernel.is_object()) return "||";
  const std::string kind = string_or_empty(kernel, "kind");
  std::string file = string_or_empty(kernel, "file");
  if (file.empty()) file = string_or_empty(kernel, "script");
  std::string name = string_or_empty(kernel, "function");
  if (name.empty()) name = string_or_empty(kernel, "name");
  return kind + "|" + (kind == "builtin" ? std::string() : file) + "|" + name;
}

std::vector<FailureGroup> current_failure_groups(const Json& failures, const Json& runs) {
  std::vector<Run> all;
  if (runs.is_array())
    for (const auto& r : runs)
      if (r.is_object()) all.push_back(run_of(r));
  std::unordered_map<std::string, const Run*> run_of_failure;
  for (const Run& r : all)
    if (r.json->contains("failure_ids") && (*r.json)["failure_ids"].is_array())
      for (const auto& id : (*r.json)["failure_ids"])
        if (id.is_string()) run_of_failure[id.get<std::string>()] = &r;
  std::map<std::string, FailureGroup> groups;  // ordered: stable output
  if (!failures.is_array()) return {};
  for (const auto& f : failures) {
    if (!f.is_object()) continue;
    const Json kernel = f.value("kernel", Json::object());
    const std::string key = kernel_key(kernel), op = string_or_empty(f, "op"), dtype = string_or_empty(f, "dtype");
    const std::int64_t created = int_of(f, "created_ms", 0);
    auto found = run_of_failure.find(string_or_empty(f, "id"));
    const Run* found_in = found == run_of_failure.end() ? nullptr : found->second;
    bool superseded = false;
    for (const Run& r : all) {
      if (r.key != key || r.op != op || r.started_ms <= created || !covers(r, dtype)) continue;
      if (new_session(r, found_in)) {
        superseded = true;
        break;
      }
    }
    if (superseded) continue;
    FailureGroup& g = groups[key + "\n" + op + "\n" + dtype];
    if (g.failures.empty()) {
      g.kernel_key = key;
      g.kernel = kernel;
      g.op = op;
      g.dtype = dtype;
    }
    g.failures.push_back(f);
  }
  std::vector<FailureGroup> out;
  for (auto& [k, g] : groups) {
    // The representative: the newest failure, and of those the earliest case of its run.
    std::stable_sort(g.failures.begin(), g.failures.end(), [](const Json& a, const Json& b) {
      const auto ca = int_of(a, "created_ms", 0), cb = int_of(b, "created_ms", 0);
      if (ca != cb) return ca > cb;
      return int_of(a, "index", 0) < int_of(b, "index", 0);
    });
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<KernelStatus> last_statuses(const Json& runs) {
  std::vector<Run> all;
  if (runs.is_array())
    for (const auto& r : runs)
      if (r.is_object()) all.push_back(run_of(r));
  std::sort(all.begin(), all.end(),
            [](const Run& a, const Run& b) { return a.started_ms > b.started_ms; });
  std::map<std::pair<std::string, std::string>, KernelStatus> newest;
  std::map<std::pair<std::string, std::string>, const Run*> session_head;
  for (const Run& r : all) {
    const auto k = std::make_pair(r.key, r.op);
    auto it = newest.find(k);
    if (it == newest.end()) {
      KernelStatus s{r.key, r.op, r.passed == r.total, r.total, r.passed, r.started_ms, r.id};
      newest.emplace(k, s);
      session_head[k] = &r;
      continue;
    }
    // Older batches of the newest client session add up; any other older run is history.
    const Run* head = session_head[k];
    if (r.kind == "client" && head->kind == "client" && !r.seed.empty() && r.seed == head->seed &&
        r.first_index < head->first_index) {
      it->second.total += r.total;
      it->second.passed_cases += r.passed;
      it->second.passed = it->second.passed && r.passed == r.total;
      session_head[k] = &r;
    }
  }
  std::vector<KernelStatus> out;
  for (auto& [k, s] : newest) out.push_back(s);
  return out;
}

}  // namespace gpuemu::lsp
