// Diagnosis: names the likely bug class of a failing case, with its evidence. Static evidence
// comes from the failing verdict itself; probes re-run the kernel on related cases (the same
// seed with inputs made contiguous, a dim at and just past a block boundary, shorter reductions).
#include "gpuemu/engine.hpp"
#include "gpuemu/rng.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace gpuemu {
namespace {

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// A recognisable name for a ratio: "sqrt(128)", "1/64", ...
std::string name_ratio(double k, const TestCase& c) {
  std::vector<std::pair<double, std::string>> known;
  for (const auto& [name, v] : c.dims) {
    if (v <= 1) continue;
    const double d = static_cast<double>(v);
    known.emplace_back(std::sqrt(d), "sqrt(" + name + "=" + std::to_string(v) + ")");
    known.emplace_back(1.0 / std::sqrt(d), "1/sqrt(" + name + "=" + std::to_string(v) + ")");
    known.emplace_back(d, name + "=" + std::to_string(v));
    known.emplace_back(1.0 / d, "1/" + name + "=" + std::to_string(v));
  }
  known.emplace_back(2.0, "2");
  known.emplace_back(0.5, "1/2");
  for (const auto& [v, n] : known)
    if (std::fabs(k / v - 1.0) < 0.01) return " (= " + n + ")";
  return "";
}

}  // namespace

Diagnosis Engine::diagnose(const std::string& op, const FuzzOptions& options, const CaseResult& failing,
                           const KernelRunner* kernel) const {
  Diagnosis d;
  const TestCase& c = failing.test_case;
  auto schema_r = m_catalogue->get(op);
  if (!schema_r) {
    d.bug_class = "no_pattern";
    d.summary = "no pattern (unknown op)";
    return d;
  }
  const OpSchema& schema = **schema_r;
  if (!failing.kernel_error.empty()) {
    d.bug_class = "kernel_error";
    d.summary = "the kernel raised an error";
    d.evidence.push_back(failing.kernel_error);
    return d;
  }
  // Shape or dtype contract.
  for (const auto& o : failing.verdict.outputs)
    if (o.message.rfind("shape mismatch", 0) == 0 || o.message.rfind("dtype mismatch", 0) == 0) {
      d.bug_class = "contract";
      d.summary = o.message;
      return d;
    }
  // 1. Non-finite where the reference is finite.
  for (const auto& o : failing.verdict.outputs)
    if (o.nonfinite_mismatch > 0) {
      d.bug_class = "overflow";
      d.summary = "non-finite outputs where the reference is finite: an overflow (e.g. exp without the max "
                  "subtraction) or a NaN-producing path";
      d.evidence.push_back(o.message);
      return d;
    }
  FuzzOptions probe_options = options;
  probe_options.dtypes = {c.dtype};
  probe_options.distribution = c.distribution;
  probe_options.attrs = c.attrs;
  probe_options.vary_attrs.clear();
  CaseGenerator gen(schema, probe_options);
  auto passes = [&](const std::map<std::string, std::int64_t, std::less<>>& dims, bool contiguous) -> std::optional<bool> {
    if (!kernel) return std::nullopt;
    // The case's own seed and a second one: a probe passes only when both pass, so luck of the
    // values (a leak hidden by a large max) does not read as a pass.
    // A third variant with every real-valued input set to ones exposes what values can hide.
    std::map<std::string, std::string, std::less<>> ones = c.value_transforms;
    for (const auto& in : schema.inputs)
      if (in.domain.find(':') == std::string::npos && c.inputs.count(in.name) &&
          dtype_info(c.inputs.at(in.name).dtype()).is_floating)
        ones[in.name] = "ones";
    const std::pair<std::uint64_t, const std::map<std::string, std::string, std::less<>>*> variants[] = {
        {c.seed, &c.value_transforms}, {derive_seed(c.seed, "probe"), &c.value_transforms}, {c.seed, &ones}};
    for (const auto& [seed, transforms] : variants) {
      auto pc = gen.generate_pinned(seed, dims, *transforms, contiguous);
      if (!pc) return std::nullopt;
      auto r = run_case(op, probe_options, *pc, *kernel);
      if (!r) return std::nullopt;
      if (!r->verdict.passed) return false;
    }
    return true;
  };
  std::map<std::string, std::int64_t, std::less<>> free_dims;
  for (const auto& dd : schema.dims)
    if (dd.expr.empty()) free_dims[dd.name] = c.dims.at(dd.name);

  // 2. Stride assumption: the same case with contiguous inputs passes.
  bool non_contiguous = false;
  for (const auto& [n, l] : c.layouts) non_contiguous |= l.kind != "contiguous" && l.kind != "offset";
  for (const auto& [n, l] : c.layouts) non_contiguous |= l.kind == "offset";
  if (non_contiguous) {
    if (auto p = passes(free_dims, true); p && *p) {
      d.bug_class = "stride_assumption";
      d.summary = "fails only with non-contiguous inputs: the kernel assumes contiguous (or zero-offset) storage";
      for (const auto& [n, l] : c.layouts)
        if (l.kind != "contiguous") d.evidence.push_back("input '" + n + "' was " + l.kind);
      d.evidence.push_back("the same case with contiguous inputs passes");
      return d;
    }
  }

  // 3. Shape probes on each long dim: a boundary at a block size.
  if (kernel) {
    for (const auto& dd : schema.dims) {
      if (!dd.expr.empty() || !dd.values.empty() || options.dims.count(dd.name)) continue;
      for (std::int64_t b : {16, 32, 64, 128, 256}) {
        if (b + 1 > dd.max || b < dd.min) continue;
        // Only the probed dim is pinned: the others are drawn under the element budget.
        auto at = [&](std::int64_t v) {
          std::map<std::string, std::int64_t, std::less<>> dims{{dd.name, v}};
          return passes(dims, false);
        };
        auto p_b = at(b), p_b1 = at(b + 1);
        if (!p_b || !p_b1 || !*p_b || *p_b1) continue;
        // b passes, b+1 fails. Tail mask: 2b passes too; one block: 2b fails as well.
        auto p_2b = 2 * b <= dd.max ? at(2 * b) : std::nullopt;
        auto p_half = at(b / 2 + 1);
        if (p_2b && *p_2b) {
          d.bug_class = "tail_mask";
          d.summary = "fails when " + dd.name + " is not a multiple of " + std::to_string(b) +
                      ": the last partial tile of " + dd.name + " is not masked";
          d.evidence.push_back(dd.name + "=" + std::to_string(b) + " and " + dd.name + "=" + std::to_string(2 * b) +
                               " pass, " + dd.name + "=" + std::to_string(b + 1) + " fails");
          return d;
        }
        if (p_half && *p_half) {
          const bool seq = dd.role == "sequence" || schema.family == "attention" || schema.family == "softmax";
          d.bug_class = seq ? "online_rescale" : "accumulation";
          d.summary = seq ? "fails only when " + dd.name + " exceeds one block (" + std::to_string(b) +
                                "): the running state across blocks (online-softmax rescale) is wrong"
                          : "fails once " + dd.name + " exceeds one block (" + std::to_string(b) +
                                "): partial results across blocks are overwritten or dropped";
          d.evidence.push_back(dd.name + "<=" + std::to_string(b) + " passes, " + dd.name + "=" +
                               std::to_string(b + 1) + " and " + dd.name + "=" + std::to_string(2 * b) + " fail");
          return d;
        }
      }
    }
  }

  // 4. A near-constant out/ref ratio, the same on a second case: a missing scale or normalisation.
  if (kernel) {
    struct Ratio {
      double med = 0, lo = 0, hi = 0;
      std::size_t count = 0;
    };
    auto ratio_of = [&](const TestCase& tc) -> std::optional<Ratio> {
      auto out = (*kernel)(tc);
      if (!out || out->empty()) return std::nullopt;
      auto ctx = make_ref_context(schema, tc.inputs, tc.attrs, tc.dtype);
      if (!ctx) return std::nullopt;
      auto ref = run_reference(schema, *ctx);
      if (!ref || ref->empty() || (*out)[0].shape() != (*ref)[0].shape) return std::nullopt;
      auto o = (*out)[0].to_f64();
      const auto& r = (*ref)[0].value;
      double rmax = 0;
      for (double x : r)
        if (std::isfinite(x)) rmax = std::max(rmax, std::fabs(x));
      std::vector<double> ratios;
      for (std::size_t i = 0; i < o.size(); ++i)
        if (std::isfinite(o[i]) && std::isfinite(r[i]) && std::fabs(r[i]) > 1e-3 * rmax && r[i] != 0)
          ratios.push_back(o[i] / r[i]);
      if (ratios.size() < 2) return std::nullopt;
      std::sort(ratios.begin(), ratios.end());
      return Ratio{ratios[ratios.size() / 2], ratios[ratios.size() / 10],
                   ratios[ratios.size() - 1 - ratios.size() / 10], ratios.size()};
    };
    auto constant = [](const Ratio& x) {
      return x.med != 0 && std::fabs(x.med - 1.0) > 0.02 && std::fabs(x.hi - x.lo) < 0.02 * std::fabs(x.med);
    };
    auto first = ratio_of(c);
    if (first && constant(*first)) {
      auto second_case = gen.generate_pinned(derive_seed(c.seed, "probe"), free_dims, c.value_transforms);
      auto second = second_case ? ratio_of(*second_case) : std::nullopt;
      if (second && constant(*second) && std::fabs(second->med / first->med - 1.0) < 0.02) {
        d.bug_class = "missing_scale";
        d.summary = "output = " + fmt(first->med) + " x reference" + name_ratio(first->med, c) +
                    ": a missing or wrong scale factor or normalisation";
        d.evidence.push_back("out/ref ratio over " + std::to_string(first->count) + " elements in [" +
                             fmt(first->lo) + ", " + fmt(first->hi) + "], the same on a second case");
        return d;
      }
    }
  }

  // 5. A wrong constant: the output matches the reference with one float attr changed
  // (scale = 1 where 1/sqrt(D) was due, eps = 0, theta off, ...).
  if (kernel) {
    auto out = (*kernel)(c);
    auto ctx = make_ref_context(schema, c.inputs, c.attrs, c.dtype);
    if (out && ctx) {
      for (const auto& a : schema.attrs) {
        if (a.type != "float") continue;
        const Json cur = c.attrs.contains(a.name) ? c.attrs[a.name] : Json();
        std::vector<double> candidates = {1.0, 0.0};
        if (cur.is_number()) {
          const double v = cur.get<double>();
          for (double f : {2.0, 0.5, 10.0, 0.1}) candidates.push_back(v * f);
          for (const auto& [n, size] : c.dims)
            if (size > 1) {
              candidates.push_back(v * std::sqrt(static_cast<double>(size)));
              candidates.push_back(v / std::sqrt(static_cast<double>(size)));
            }
        }
        for (double alt : candidates) {
          if (cur.is_number() && alt == cur.get<double>()) continue;
          RefContext alt_ctx = *ctx;
          alt_ctx.attrs[a.name] = alt;
          auto ref = run_reference(schema, alt_ctx);
          if (!ref) continue;
          Verdict v = judge(schema, alt_ctx, *ref, *out, failing.verdict.envelope);
          if (v.passed) {
            d.bug_class = a.name == "scale" ? "missing_scale" : a.name == "eps" ? "eps_placement" : "wrong_constant";
            d.summary = "the output matches the reference computed with " + a.name + "=" + fmt(alt) +
                        " instead of " + (cur.is_null() ? std::string("its default") : cur.dump()) +
                        ": a wrong or missing constant (e.g. a missing 1/sqrt(D) scale)";
            d.evidence.push_back("max error " + fmt(v.max_error) + " against the reference with " + a.name + "=" +
                                 fmt(alt) + ", vs " + fmt(failing.verdict.max_error) + " against the true one");
            return d;
          }
        }
      }
    }
  }

  // 6. Error growing with a reduction length.
  if (kernel) {
    for (const auto& name : schema.reduced_dims) {
      const DimDomain* dd = schema.find_dim(name);
      if (!dd || !dd->expr.empty() || options.dims.count(name)) continue;
      const std::int64_t n = c.dims.at(name);
      if (n < 64) continue;
      std::vector<std::pair<std::int64_t, double>> errs;
      for (std::int64_t v : {n / 16, n / 4, n}) {
        if (v < std::max<std::int64_t>(dd->min, 1)) continue;
        auto dims = free_dims;
        dims[name] = v;
        auto pc = gen.generate_pinned(c.seed, dims, c.value_transforms);
        if (!pc) continue;
        auto r = run_case(op, probe_options, *pc, *kernel);
        if (r) errs.emplace_back(v, r->verdict.max_error);
      }
      if (errs.size() == 3 && errs[0].second < errs[1].second && errs[1].second < errs[2].second &&
          errs[2].second > 2.0 * errs[0].second) {
        d.bug_class = "accumulation";
        d.summary = "the error grows with the reduction length " + name +
                    ": an accumulator kept in low precision (or partial sums lost)";
        for (const auto& [v, e] : errs) d.evidence.push_back(name + "=" + std::to_string(v) + ": error " + fmt(e));
        return d;
      }
    }
  }
  d.bug_class = "no_pattern";
  d.summary = "no pattern: the error is not confined to a tile, a layout, a scale or a length";
  return d;
}

}  // namespace gpuemu
