// The false-positive audit of the shipped envelopes (docs/calibration.md, "Held-out audit"): every
// built-in control of every op, fuzzed on seeds disjoint from calibration's under every value
// distribution and with non-contiguous layouts, judged with the envelopes the engine loads. A
// correct control must never fail; the audit prints, per (op, dtype), the worst normalised error
// seen over the envelope (the margin: below 1 passes) and every failing case with its replay
// command. Each known-buggy built-in kernel is fuzzed the same way and must be caught.
//
//   build/bin/audit_controls [--cases N] [--bug-cases N] [--seed S] [--json FILE] [--attr NAME=VALUE]...
//                            [--present NAME=true|false]... [OP...]
//
// --attr holds an attr at a value (a JSON value, or a bare string: --attr reduction=none) in every
// run, controls' and bugs'; the op's other attrs are varied as usual. Pinned, a bug that only shows
// under another value is reported as missed. --present pins an optional input present or absent in
// every case (the backward ops' autograd mode: --present x=true for softmax_backward, --present
// out=false --present lse=false for flash_attention_backward; docs/python.md).
//
// Exit 0 when no control failed and every bug was caught, 1 otherwise. A long run, not a test.
#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/rng.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

using namespace gpuemu;

namespace {

struct Worst {
  double ratio = 0.0;  // max_error / envelope
  double max_error = 0.0;
  double envelope = 0.0;
  std::string where;  // kernel, strategy, case
  std::int64_t cases = 0;
  std::int64_t failed = 0;
};

const char* const k_strategies[] = {"regular", "boundary", "adversarial", "special"};

}  // namespace

int main(int argc, char** argv) {
  std::int64_t cases = 50, bug_cases = 100;
  std::uint64_t seed = 20261130;
  std::string json_path;
  std::vector<std::string> only;
  Json pins = Json::object();
  std::map<std::string, bool, std::less<>> present;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cases" && i + 1 < argc) cases = std::atoll(argv[++i]);
    else if (a == "--bug-cases" && i + 1 < argc) bug_cases = std::atoll(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--attr" && i + 1 < argc) {
      const std::string text = argv[++i];
      const auto eq = text.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "audit_controls: --attr %s: expected NAME=VALUE\n", text.c_str());
        return 2;
      }
      const std::string value = text.substr(eq + 1);
      Json v = Json::parse(value, nullptr, false);
      pins[text.substr(0, eq)] = v.is_discarded() ? Json(value) : v;
    } else if (a == "--present" && i + 1 < argc) {
      const std::string text = argv[++i];
      const auto eq = text.find('=');
      const std::string value = eq == std::string::npos ? "" : text.substr(eq + 1);
      if (eq == std::string::npos || eq == 0 || (value != "true" && value != "false")) {
        std::fprintf(stderr, "audit_controls: --present %s: expected NAME=true or NAME=false\n", text.c_str());
        return 2;
      }
      present[text.substr(0, eq)] = value == "true";
    } else if (a == "-h" || a == "--help") {
      std::puts("audit_controls [--cases N] [--bug-cases N] [--seed S] [--json FILE] [--attr NAME=VALUE]... "
                "[--present NAME=true|false]... [OP...]");
      return 0;
    } else only.push_back(a);
  }
  auto engine_r = Engine::create_default();
  if (!engine_r) {
    std::fprintf(stderr, "audit_controls: %s\n", engine_r.error().message.c_str());
    return 2;
  }
  const Engine& engine = *engine_r;
  std::vector<std::string> ops = only;
  if (ops.empty())
    for (const OpSchema* s : engine.catalogue().all()) ops.push_back(s->name);

  Json report = Json::array();
  int bad = 0;
  for (const auto& op : ops) {
    auto schema = engine.catalogue().get(op);
    if (!schema) {
      std::fprintf(stderr, "audit_controls: %s\n", schema.error().message.c_str());
      return 2;
    }
    const std::string ref = (*schema)->reference;
    const BuiltinOp* b =
        ref.rfind("builtin:", 0) == 0 ? BuiltinRegistry::instance().find(ref.substr(8)) : nullptr;
    if (!b) continue;
    // Controls must be correct for every attr value, and bugs behind an attr (padding, dilation)
    // only show when it varies: vary every attr of the schema.
    std::vector<std::string> every_attr;
    for (const auto& a : (*schema)->attrs)
      if (!pins.contains(a.name)) every_attr.push_back(a.name);
    const auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, Worst> per_dtype;  // controls, by dtype
    Json failures = Json::array();
    for (const auto& control : b->controls) {
      auto kernel = engine.builtin_kernel(op, control.name);
      if (!kernel) continue;
      for (const char* strategy : k_strategies) {
        FuzzRequest req;
        req.op = op;
        req.options.distribution = *parse_distribution(strategy);
        req.options.vary_attrs = every_attr;
        req.options.attrs = pins;
        req.options.present = present;
        req.seed = derive_seed(seed, op + ":" + strategy);
        req.iterations = cases;
        req.diagnose = false;
        req.on_case = [&](const CaseResult& r) {
          auto& w = per_dtype[std::string(dtype_name(r.test_case.dtype))];
          ++w.cases;
          const double env = r.verdict.envelope > 0 ? r.verdict.envelope : 1.0;
          const double ratio = r.verdict.max_error / env;
          if (!r.verdict.passed) {
            ++w.failed;
            failures.push_back({{"kernel", control.name}, {"strategy", strategy}, {"seed", req.seed},
                                {"case", r.test_case.index}, {"dtype", dtype_name(r.test_case.dtype)},
                                {"max_error", r.verdict.max_error}, {"envelope", r.verdict.envelope},
                                {"message", r.verdict.message}});
          }
          if (ratio > w.ratio) {
            w.ratio = ratio;
            w.max_error = r.verdict.max_error;
            w.envelope = r.verdict.envelope;
            w.where = control.name + " " + strategy + " --seed " + std::to_string(req.seed) +
                      " --case " + std::to_string(r.test_case.index);
          }
        };
        auto rep = engine.fuzz(req, *kernel);
        if (!rep) {
          std::fprintf(stderr, "audit_controls: %s/%s: %s\n", op.c_str(), control.name.c_str(),
                       rep.error().message.c_str());
          ++bad;
        }
      }
    }
    // Every known bug must be caught in bug_cases cases (the default run's 100): under the default
    // strategy, or, for bugs that only non-finite inputs reach (NaN propagation), under special.
    Json bugs = Json::array();
    for (const auto& bug : b->buggy) {
      auto kernel = engine.builtin_kernel(op, bug.name);
      if (!kernel) continue;
      Json entry = {{"kernel", bug.name}, {"caught", false}};
      for (const char* strategy : {"adversarial", "special"}) {
        FuzzRequest req;
        req.op = op;
        req.options.distribution = *parse_distribution(strategy);
        req.options.vary_attrs = every_attr;
        req.options.attrs = pins;
        req.options.present = present;
        req.seed = derive_seed(seed, op + ":bug:" + bug.name);
        req.iterations = bug_cases;
        req.fail_fast = true;
        req.diagnose = false;
        auto rep = engine.fuzz(req, *kernel);
        if (rep && rep->first_failure >= 0) {
          entry = {{"kernel", bug.name}, {"caught", true}, {"strategy", strategy},
                   {"cases_to_first_failure", rep->first_failure + 1}};
          break;
        }
      }
      if (!entry["caught"].get<bool>()) ++bad;
      bugs.push_back(entry);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& [dt, w] : per_dtype) {
      if (w.failed) ++bad;
      std::printf("%-20s %-14s cases %5lld  failed %3lld  worst %8.3g / envelope %6.3g = %5.2f  (%s)\n",
                  op.c_str(), dt.c_str(), static_cast<long long>(w.cases), static_cast<long long>(w.failed),
                  w.max_error, w.envelope, w.ratio, w.where.c_str());
      report.push_back({{"op", op}, {"dtype", dt}, {"cases", w.cases}, {"failed", w.failed},
                        {"worst_ratio", w.ratio}, {"worst_error", w.max_error}, {"envelope", w.envelope},
                        {"worst_case", w.where}});
    }
    std::string missed, special_only;
    for (const auto& bj : bugs) {
      if (!bj["caught"].get<bool>()) missed += " " + bj["kernel"].get<std::string>();
      else if (bj["strategy"] == "special") special_only += " " + bj["kernel"].get<std::string>();
    }
    std::printf("%-20s bugs caught %zu/%zu%s%s%s%s  [%.0f s]\n", op.c_str(),
                bugs.size() - static_cast<std::size_t>(std::count_if(bugs.begin(), bugs.end(),
                    [](const Json& x) { return !x["caught"].get<bool>(); })),
                bugs.size(), missed.empty() ? "" : "  MISSED:", missed.c_str(),
                special_only.empty() ? "" : "  (special only:", special_only.empty() ? "" : (special_only + ")").c_str(),
                secs);
    for (const auto& f : failures)
      std::printf("  FALSE POSITIVE %s\n", f.dump().c_str());
    std::fflush(stdout);
    report.push_back({{"op", op}, {"bugs", bugs}, {"false_positives", failures}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
  std::printf("%s\n", bad ? "AUDIT FAILED" : "audit passed: no control failed, every bug caught");
  return bad ? 1 : 0;
}
