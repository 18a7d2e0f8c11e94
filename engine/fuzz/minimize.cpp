// The minimizer: shrink each dim to where the failure starts (a pass/fail boundary such as
// "fails at N=129, passes at N=128", else the smallest failing size), then simplify the values
// while the case still fails.
#include "gpuemu/engine/engine.hpp"

#include <algorithm>
#include <set>

namespace gpuemu {

Json Minimized::to_json() const {
  Json j = test_case.describe();
  j["summary"] = summary;
  j["verdict"] = verdict.to_json();
  j["evaluations"] = evaluations;
  j["pinned_dims"] = Json::object();
  for (const auto& [k, v] : dims) j["pinned_dims"][k] = v;
  j["value_transforms"] = Json::object();
  for (const auto& [k, v] : transforms) j["value_transforms"][k] = v;
  return j;
}

Result<Minimized> Engine::minimize(const std::string& op, const FuzzOptions& base_options, const TestCase& failing,
                                   const KernelRunner& kernel, int max_evaluations) const {
  GPUEMU_TRY(const OpSchema* schema, m_catalogue->get(op));
  FuzzOptions options = base_options;
  options.dtypes = {failing.dtype};
  options.distribution = failing.distribution;
  // Attrs as the failing case had them.
  options.attrs = failing.attrs;
  options.vary_attrs.clear();
  CaseGenerator gen(*schema, options);
  Minimized m;
  m.transforms = failing.value_transforms;
  for (const auto& d : schema->dims)
    if (d.expr.empty()) m.dims[d.name] = failing.dims.at(d.name);

  std::optional<CaseResult> last_fail;
  auto fails = [&](const std::map<std::string, std::int64_t, std::less<>>& dims,
                   const std::map<std::string, std::string, std::less<>>& transforms) -> bool {
    if (m.evaluations >= max_evaluations) return false;
    ++m.evaluations;
    auto c = gen.generate_pinned(failing.seed, dims, transforms);
    if (!c) return false;  // outside the domain (a constraint does not hold)
    auto r = run_case(op, options, *c, kernel);
    if (!r || r->verdict.passed) return false;
    last_fail = std::move(r).value();
    return true;
  };
  if (!fails(m.dims, m.transforms))
    return make_error(ErrorCode::invalid_argument, "the case does not fail when replayed; nothing to minimise");
  CaseResult best = *last_fail;

  // Values: simpler inputs while it still fails (first, so that dims shrink on values that
  // expose the bug at every size, e.g. a tail leak hidden by a large row max; and again at the end).
  auto simplify_values = [&] {
  for (const auto& in : schema->inputs) {
    if (!best.test_case.inputs.count(in.name) || in.domain.find(':') != std::string::npos) continue;
    if (!dtype_info(best.test_case.inputs.at(in.name).dtype()).is_floating) continue;
    if (m.transforms.count(in.name)) continue;
    for (const char* t : {"zeros", "ones", "small_ints"}) {
      auto transforms = m.transforms;
      transforms[in.name] = t;
      if (fails(m.dims, transforms)) {
        m.transforms = transforms;
        best = *last_fail;
        break;
      }
    }
  }
  };
  simplify_values();

  // Batch-like dims first (cheap evaluations afterwards), reductions and sequences last.
  std::vector<const DimDomain*> order;
  for (const auto& d : schema->dims)
    if (d.expr.empty()) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(), [](const DimDomain* a, const DimDomain* b) {
    auto rank = [](const DimDomain* d) { return d->role == "reduction" || d->role == "sequence" ? 1 : 0; };
    return rank(a) < rank(b);
  });
  std::vector<std::string> notes;
  for (const DimDomain* d : order) {
    const std::int64_t v0 = m.dims[d->name];
    std::vector<std::int64_t> allowed;
    if (auto it = base_options.dims.find(d->name); it != base_options.dims.end()) allowed = it->second;
    else if (!d->values.empty()) allowed = d->values;
    auto is_allowed = [&](std::int64_t v) {
      return v >= d->min && v <= d->max && (allowed.empty() || std::count(allowed.begin(), allowed.end(), v));
    };
    auto with = [&](std::int64_t v) {
      auto dims = m.dims;
      dims[d->name] = v;
      return dims;
    };
    bool done = false;
    // 1. A pass/fail boundary at a power of two: 2^j passes, 2^j + 1 fails.
    // Below the failing size first, then above it (a case that fails at N=9 because its only
    // tile is partial still has its boundary at a block size such as 128).
    const std::int64_t limit = std::min(d->max, std::max<std::int64_t>(v0, 4096));
    // Block-sized boundaries (16 and up) first: a pass at N=1 is often luck of the values.
    std::vector<std::int64_t> powers;
    for (std::int64_t p = 16; p + 1 <= limit; p *= 2) powers.push_back(p);
    for (std::int64_t p = 1; p < 16 && p + 1 <= limit; p *= 2) powers.push_back(p);
    for (std::int64_t p : powers) {
      if (done || !allowed.empty()) break;
      if (!is_allowed(p) || !is_allowed(p + 1)) continue;
      if (fails(with(p), m.transforms)) continue;
      if (fails(with(p + 1), m.transforms)) {
        m.dims[d->name] = p + 1;
        best = *last_fail;
        notes.push_back("fails at " + d->name + "=" + std::to_string(p + 1) + ", passes at " + d->name + "=" +
                        std::to_string(p));
        done = true;
      }
    }
    if (done) continue;
    // 2. The smallest failing size.
    std::set<std::int64_t> candidates;
    if (!allowed.empty()) {
      for (auto v : allowed)
        if (v < v0) candidates.insert(v);
    } else {
      for (std::int64_t v = d->min; v < std::min(v0, d->min + 8); ++v) candidates.insert(std::max<std::int64_t>(v, 0));
      for (std::int64_t p = 8; p < v0; p *= 2) {
        candidates.insert(p);
        candidates.insert(p + 1);
      }
    }
    std::int64_t previous_pass = -1;
    for (auto v : candidates) {
      if (!is_allowed(v)) continue;
      if (fails(with(v), m.transforms)) {
        m.dims[d->name] = v;
        best = *last_fail;
        if (previous_pass >= 0)
          notes.push_back("fails at " + d->name + "=" + std::to_string(v) + ", passes at " + d->name + "=" +
                          std::to_string(previous_pass));
        break;
      }
      previous_pass = v;
    }
  }
  simplify_values();
  m.test_case = best.test_case;
  m.verdict = best.verdict;
  std::string dims_text;
  for (const auto& [k, v] : best.test_case.dims) dims_text += (dims_text.empty() ? "" : ", ") + k + "=" + std::to_string(v);
  if (notes.empty()) {
    m.summary = "fails at " + dims_text + " (no smaller failing size found)";
  } else {
    m.summary.clear();
    for (const auto& n : notes) m.summary += (m.summary.empty() ? "" : "; ") + n;
    m.summary += " [" + dims_text + "]";
  }
  return m;
}

}  // namespace gpuemu
