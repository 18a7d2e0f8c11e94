// Diagnosis: names the likely bug class of a failing case, with its evidence. Static evidence
// comes from the failing verdict itself; probes re-run the kernel on related cases: the same case
// with constant values, with contiguous inputs, in float32, with another attr value, scaled up; a
// dim at and just past a block boundary; a reduction 16x shorter; an independent case. Every rule
// is generic: it reads only the schema (dims, roles, reduced dims, attrs, dtypes), the kernel's
// outputs and pass/fail on the probes, never the kernel's name. The rules and their order are
// documented in docs/fuzzing.md ("Minimizer and diagnosis").
#include "fuzz/signature.hpp"
#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/rng.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace gpuemu {
namespace {

using Dims = std::map<std::string, std::int64_t, std::less<>>;
using Transforms = std::map<std::string, std::string, std::less<>>;

// Block sizes a tiled kernel's boundaries are looked for at (powers of two, as BLOCK sizes are).
constexpr std::int64_t k_blocks[] = {16, 32, 64, 128, 256, 512, 1024};
// A wrong constant keeps the output close to the reference: the median relative deviation of the
// failing elements stays under this (a wrong operand, index or mask is off by O(1)).
constexpr double k_close_deviation = 0.05;

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

std::string dim_eq(const std::string& name, std::int64_t v) {
  return name + "=" + std::to_string(v);
}

// A recognisable name for a ratio: "sqrt(128)", "1/64", ...
std::string name_ratio(double k, const TestCase& c) {
  std::vector<std::pair<double, std::string>> known;
  for (const auto& [name, v] : c.dims) {
    if (v <= 1) continue;
    const double d = static_cast<double>(v);
    known.emplace_back(std::sqrt(d), "sqrt(" + dim_eq(name, v) + ")");
    known.emplace_back(1.0 / std::sqrt(d), "1/sqrt(" + dim_eq(name, v) + ")");
    known.emplace_back(d, dim_eq(name, v));
    known.emplace_back(1.0 / d, "1/" + dim_eq(name, v));
  }
  known.emplace_back(2.0, "2");
  known.emplace_back(0.5, "1/2");
  for (const auto& [v, n] : known)
    if (std::fabs(k / v - 1.0) < 0.01) return " (= " + n + ")";
  return "";
}

std::string attr_text(const Json& v) {
  return v.is_number() ? fmt(v.get<double>()) : v.dump();
}

// Values an attr is tried at by the wrong-constant probe: its default and domain (a value
// hard-coded instead of the one passed), the other bool, and for floats 1 and 0 (a factor or term
// left out), factors of 2 and 10, sqrt and square (an exponent halved or doubled), and times or
// divided by sqrt(n) for each dim n (a scale by the wrong length).
std::vector<Json> attr_candidates(const AttrSpec& a, const Json& cur, const TestCase& c) {
  std::vector<Json> out;
  auto add = [&](const Json& v) {
    if (v.is_null() || v == cur) return;
    if (v.is_number() && cur.is_number() && v.get<double>() == cur.get<double>()) return;
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  add(a.default_value);
  for (const auto& v : a.values) add(v);
  if (a.type == "bool" && cur.is_boolean()) add(!cur.get<bool>());
  if (a.type == "float") {
    add(1.0);
    add(0.0);
    if (cur.is_number()) {
      const double v = cur.get<double>();
      for (double f : {2.0, 0.5, 10.0, 0.1}) add(v * f);
      if (v > 0) {
        add(std::sqrt(v));
        add(v * v);
      }
      for (const auto& [n, size] : c.dims)
        if (size > 1) {
          add(v * std::sqrt(static_cast<double>(size)));
          add(v / std::sqrt(static_cast<double>(size)));
        }
    }
  }
  return out;
}

// The narrowest 16-bit float dtype every finite output of a float32 tensor is exactly
// representable in, when there are enough distinct values to tell (a float32 result of random
// inputs fits bfloat16 with probability 2^-16; 8 distinct ones all do by chance 2^-128).
std::optional<DType> narrow_dtype(const Tensor& t) {
  if (t.dtype() != DType::float32) return std::nullopt;
  std::vector<double> v;
  for (double x : t.to_f64())
    if (std::isfinite(x) && x != 0) v.push_back(x);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  if (v.size() < 8) return std::nullopt;
  for (DType narrow : {DType::bfloat16, DType::float16})
    if (std::all_of(v.begin(), v.end(), [&](double x) { return round_to(narrow, x) == x; }))
      return narrow;
  return std::nullopt;
}

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

Diagnosis make(std::string bug_class, std::string summary, std::vector<std::string> evidence = {}) {
  return Diagnosis{std::move(bug_class), std::move(summary), std::move(evidence)};
}

// The probes of one diagnosis. Each rule returns a diagnosis when its evidence holds; `run` tries
// them in order (numbered as in docs/fuzzing.md, where rule 1 is the kernel error and contract
// checked in Engine::diagnose). A probe regenerates a case from a seed with some dims pinned, in
// the failing case's dtype (or float32), distribution and attrs.
class Probes {
 public:
  Probes(const Engine& engine, const OpSchema& schema, const FuzzOptions& options,
         const CaseResult& failing, const KernelRunner& kernel)
      : m_engine(engine),
        m_schema(schema),
        m_options(options),
        m_failing(failing),
        m_c(failing.test_case),
        m_kernel(kernel),
        m_gen(generator_for(m_c.dtype)),
        m_probe_seed(derive_seed(m_c.seed, "probe")) {
    for (const auto& o : failing.verdict.outputs)
      if (o.nonfinite_mismatch > 0 && !m_nonfinite) m_nonfinite = &o;
    // Every real-valued input set to ones: constant values hide what depends on them (a running
    // max that never rises, sums that never overflow).
    m_ones = m_c.value_transforms;
    for (const auto& in : schema.inputs)
      if (in.domain.find(':') == std::string::npos && m_c.inputs.count(in.name) &&
          is_floating(m_c.inputs.at(in.name).dtype()))
        m_ones[in.name] = "ones";
    for (const auto& dd : schema.dims)
      if (dd.expr.empty()) m_free_dims[dd.name] = m_c.dims.at(dd.name);
  }

  Diagnosis run() {
    using Rule = std::optional<Diagnosis> (Probes::*)();
    for (Rule rule : {&Probes::overflow_at_moderate_values, &Probes::stride_assumption,
                      &Probes::dim_stride_assumption, &Probes::precision, &Probes::narrow_outputs, &Probes::attr_mismatch,
                      &Probes::eps_placement, &Probes::block_boundaries, &Probes::constant_ratio,
                      &Probes::overflow_at_scale, &Probes::length, &Probes::formula_constant})
      if (auto d = (this->*rule)()) return *d;
    if (m_nonfinite) return overflow(false);
    return make("no_pattern",
                "no pattern: the error is not confined to a tile, a layout, a precision, a scale, "
                "a constant or a length");
  }

  // Without a kernel to probe: only what the verdict shows.
  static Diagnosis static_only(const CaseResult& failing) {
    for (const auto& o : failing.verdict.outputs)
      if (o.nonfinite_mismatch > 0)
        return make("overflow",
                    "non-finite outputs where the reference is finite: an overflow or a "
                    "NaN-producing path",
                    {o.message});
    return make("no_pattern", "no pattern (no kernel to probe)");
  }

 private:
  CaseGenerator generator_for(DType dtype) const {
    FuzzOptions o = m_options;
    o.dtypes = {dtype};
    o.distribution = m_c.distribution;
    o.attrs = m_c.attrs;
    o.vary_attrs.clear();
    return CaseGenerator(m_schema, o);
  }
  double envelope(DType dtype) const { return m_engine.envelopes().get(m_schema.name, dtype); }

  // One probe: pass, fail, or nullopt when inconclusive (the case cannot be drawn, or the kernel
  // raised, e.g. on a dtype it does not support).
  std::optional<bool> run_one(const CaseGenerator& g, std::uint64_t seed, const Dims& dims,
                              const Transforms& tr, bool contiguous = false) const {
    auto pc = g.generate_pinned(seed, dims, tr, contiguous);
    if (!pc) return std::nullopt;
    return run_case(*pc);
  }
  std::optional<bool> run_case(const TestCase& tc) const {
    auto r = m_engine.run_case(m_schema.name, m_gen.options(), tc, m_kernel);
    if (!r || !r->kernel_error.empty()) return std::nullopt;
    return r->verdict.passed;
  }
  // A probe passes only when the case's own seed, a second seed and the ones variant all pass, so
  // luck of the values (a leak hidden by a large max) does not read as a pass.
  std::optional<bool> passes(const CaseGenerator& g, const Dims& dims,
                             bool contiguous = false) const {
    const std::pair<std::uint64_t, const Transforms*> variants[] = {
        {m_c.seed, &m_c.value_transforms},
        {m_probe_seed, &m_c.value_transforms},
        {m_c.seed, &m_ones}};
    for (const auto& [seed, tr] : variants) {
      auto p = run_one(g, seed, dims, *tr, contiguous);
      if (!p || !*p) return p;
    }
    return true;
  }
  // The failing case drawn where the shape probes run (itself, or its float32 version).
  std::optional<TestCase> in_shape_dtype() const {
    if (m_shape_gen == &m_gen) return m_c;
    auto w = m_shape_gen->generate_pinned(m_c.seed, m_free_dims, m_c.value_transforms);
    return w ? std::optional<TestCase>(std::move(*w)) : std::nullopt;
  }

  // The median |out/ref - 1| over the elements of the first output that fail the envelope
  // (finite, non-zero reference); nullopt when none fails or the kernel or reference cannot run.
  std::optional<double> failing_deviation(const TestCase& tc) const {
    auto out = m_kernel(tc);
    auto ctx = case_ref_context(m_schema, tc);
    if (!out || !ctx || out->empty()) return std::nullopt;
    auto ref = run_reference(m_schema, *ctx);
    if (!ref || ref->empty() || (*out)[0].shape() != (*ref)[0].shape) return std::nullopt;
    const double env = envelope(tc.dtype);
    const Verdict v = judge(m_schema, *ctx, *ref, *out, env);
    const std::vector<double> o = (*out)[0].to_f64();
    const RefVec& r = (*ref)[0].value;
    if (v.outputs.empty() || v.outputs[0].errors.size() != o.size()) return std::nullopt;
    std::vector<double> dev;
    for (std::size_t e = 0; e < o.size(); ++e)
      if (v.outputs[0].errors[e] > env && std::isfinite(o[e]) && std::isfinite(r[e]) && r[e] != 0)
        dev.push_back(std::fabs(o[e] / r[e] - 1.0));
    return median(std::move(dev));
  }

  Diagnosis overflow(bool confirmed) const {
    Diagnosis d = make("overflow",
                       confirmed ? "non-finite outputs where the reference is finite, gone with "
                                   "moderate values: an overflow (e.g. exp without the max "
                                   "subtraction)"
                                 : "non-finite outputs where the reference is finite: an overflow "
                                   "or a NaN-producing path",
                       {m_nonfinite->message});
    if (confirmed) d.evidence.push_back("the same case with every real input set to ones passes");
    return d;
  }

  // 2. Non-finite where the reference is finite, gone when every real input is one. (Still
  // non-finite with ones: the other rules may explain it, e.g. a never-written tail; `overflow`
  // is the fallback at the end.)
  std::optional<Diagnosis> overflow_at_moderate_values() {
    if (!m_nonfinite) return std::nullopt;
    if (auto p = run_one(m_gen, m_c.seed, m_free_dims, m_ones); p && *p) return overflow(true);
    return std::nullopt;
  }

  // 3. Stride assumption: the same case with contiguous inputs passes.
  std::optional<Diagnosis> stride_assumption() {
    bool non_contiguous = false;
    for (const auto& [n, l] : m_c.layouts) non_contiguous |= l.kind != "contiguous";
    if (!non_contiguous) return std::nullopt;
    auto p = passes(m_gen, m_free_dims, true);
    if (!p || !*p) return std::nullopt;
    Diagnosis d = make("stride_assumption",
                       "fails only with non-contiguous inputs: the kernel assumes contiguous (or "
                       "zero-offset) storage");
    for (const auto& [n, l] : m_c.layouts)
      if (l.kind != "contiguous") d.evidence.push_back("input '" + n + "' was " + l.kind);
    d.evidence.push_back("the same case with contiguous inputs passes");
    return d;
  }

  // 3b. Stride assumption along a dim attr: a case whose `dim` (an attr naming a dim of an input,
  // softmax's) is not that input's innermost dim fails, and the same case with the input stored so
  // that `dim` is innermost (the same values, shape and attrs; only the strides differ) passes:
  // the kernel walks the lines along `dim` as if they were contiguous (a wrapper that moves `dim`
  // last and forgets `.contiguous()`). Only the storage changes, so a correct kernel passes both.
  std::optional<Diagnosis> dim_stride_assumption() {
    for (const auto& a : m_schema.attrs) {
      if (a.dim_of.empty() || !m_c.attrs.contains(a.name) || !m_c.attrs[a.name].is_number_integer()) continue;
      auto it = m_c.inputs.find(a.dim_of);
      if (it == m_c.inputs.end()) continue;
      const std::int64_t rank = it->second.dim();
      std::int64_t d = m_c.attrs[a.name].get<std::int64_t>();
      if (d < 0) d += rank;
      if (d < 0 || d >= rank || d == rank - 1 || it->second.shape()[static_cast<std::size_t>(d)] < 2) continue;
      auto relaid = [&](std::optional<TestCase> tc) -> std::optional<bool> {
        if (!tc) return std::nullopt;
        auto& t = tc->inputs.at(a.dim_of);
        t = innermost(t, d);
        tc->layouts[a.dim_of] = InputLayout{"transposed", 0};
        return run_case(*tc);
      };
      const std::pair<std::uint64_t, const Transforms*> variants[] = {
          {m_c.seed, &m_c.value_transforms}, {m_probe_seed, &m_c.value_transforms}, {m_c.seed, &m_ones}};
      bool all = true;
      for (const auto& [seed, tr] : variants) {
        auto pc = m_gen.generate_pinned(seed, m_free_dims, *tr);
        auto p = relaid(pc ? std::optional<TestCase>(std::move(*pc)) : std::nullopt);
        if (!p || !*p) {
          all = false;
          break;
        }
      }
      if (!all) continue;
      return make("stride_assumption",
                  "fails with '" + a.dim_of + "' walked along " + a.name + "=" + attr_text(m_c.attrs[a.name]) +
                      ", which is not its innermost dim, and passes with the same values stored so that "
                      "it is: the kernel assumes the lines it walks are contiguous",
                  {"the same case with '" + a.dim_of + "' stored with dim " + std::to_string(d) +
                   " innermost passes (its seed, a second seed, and constant values)"});
    }
    return std::nullopt;
  }
  // `t`'s values in a fresh storage whose innermost dim is `d`: a view with t's shape.
  static Tensor innermost(const Tensor& t, std::int64_t d) {
    Shape stored;
    const auto rank = static_cast<std::size_t>(t.dim());
    for (std::size_t i = 0; i < rank; ++i)
      if (static_cast<std::int64_t>(i) != d) stored.push_back(t.shape()[i]);
    stored.push_back(t.shape()[static_cast<std::size_t>(d)]);
    const auto st = contiguous_strides(stored);
    std::vector<std::int64_t> strides(rank);
    for (std::size_t i = 0, j = 0; i < rank; ++i)
      strides[i] = static_cast<std::int64_t>(i) == d ? st.back() : st[j++];
    Tensor base = Tensor::zeros(t.dtype(), stored);
    Tensor v = Tensor::view(t.dtype(), t.shape(), strides, 0, base.storage()).value();
    const std::vector<double> values = t.to_f64();
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(values.size()); ++i)
      v.set_flat(i, values[static_cast<std::size_t>(i)]);
    return v;
  }

  // 4. Precision: a low-precision case that passes when drawn in float32 (where "the input dtype"
  // is float32 too): something is kept or rounded in the input dtype. When the bug shows in float32
  // too, the shape probes run there: float32's tighter rounding shows a dropped or leaked term at
  // any magnitude, where fp16/bf16 may round it away.
  std::optional<Diagnosis> precision() {
    const bool low = is_floating(m_c.dtype) && dtype_info(m_c.dtype).unit_roundoff > k_u_acc;
    const auto& dtypes = m_schema.dtypes;
    if (!low || std::find(dtypes.begin(), dtypes.end(), DType::float32) == dtypes.end())
      return std::nullopt;
    m_gen32.emplace(generator_for(DType::float32));
    auto p = passes(*m_gen32, m_free_dims);
    if (p && !*p) m_shape_gen = &*m_gen32;
    if (!p || !*p) return std::nullopt;
    return make("accumulation",
                "fails in " + std::string(dtype_name(m_c.dtype)) +
                    " but passes in float32: precision is lost where the kernel keeps an "
                    "accumulator (or an intermediate) in the input dtype",
                {"the same case in float32 (its seed, a second seed, and constant values) passes"});
  }

  // 4b. Float32 outputs (of the failing case, or its float32 version, or an op whose output dtype
  // is not the case's) that all fit a 16-bit dtype: the kernel rounds its result (an accumulator)
  // to that dtype, whatever the case dtype. (Not on the minimizer's simple values: ones and small
  // integers fit any dtype.)
  std::optional<Diagnosis> narrow_outputs() {
    const bool wide_output = m_c.dtype == DType::float32 || m_shape_gen != &m_gen ||
                             m_schema.outputs.empty() || m_schema.outputs[0].dtype != "case";
    if (!m_c.value_transforms.empty() || !wide_output) return std::nullopt;
    auto wide = in_shape_dtype();
    if (!wide) return std::nullopt;
    auto out = m_kernel(*wide);
    if (!out || out->empty()) return std::nullopt;
    auto narrow = narrow_dtype((*out)[0]);
    if (!narrow) return std::nullopt;
    const std::string name(dtype_name(*narrow));
    return make("accumulation",
                "the float32 outputs carry only " + name +
                    "'s precision: the kernel keeps an accumulator (or its result) in " + name,
                {"every output of the float32 case is exactly representable in " + name});
  }

  // 5. A wrong constant or a mishandled attr: the output matches the reference computed with one
  // attr changed (scale = 1 where 1/sqrt(D) was due, eps = 0, theta hard-coded to its default), on
  // this case and on a second one (a degenerate shape can make two attrs agree by chance). Before
  // the shape probes: constant inputs hide a missing scale as they hide a missing rescale.
  std::optional<Diagnosis> attr_mismatch() {
    struct Run {  // the kernel's output and the reference context of a case
      std::vector<Tensor> out;
      RefContext ctx;
    };
    auto run_of = [&](const TestCase& tc) -> std::optional<Run> {
      auto out = m_kernel(tc);
      auto ctx = case_ref_context(m_schema, tc);
      if (!out || !ctx) return std::nullopt;
      return Run{std::move(*out), std::move(*ctx)};
    };
    auto matches = [&](const Run& run, const std::string& attr,
                       const Json& alt) -> std::optional<Verdict> {
      RefContext alt_ctx = run.ctx;
      alt_ctx.attrs[attr] = alt;
      auto ref = run_reference(m_schema, alt_ctx);
      if (!ref) return std::nullopt;
      Verdict v = judge(m_schema, alt_ctx, *ref, run.out, envelope(run.ctx.case_dtype));
      return v.passed ? std::optional<Verdict>(std::move(v)) : std::nullopt;
    };
    auto here = run_of(m_c);
    if (!here) return std::nullopt;
    std::optional<std::optional<Run>> there;  // the second case, made when first needed
    for (const auto& a : m_schema.attrs) {
      if (a.type == "ints") continue;
      const Json cur = here->ctx.attrs.contains(a.name) ? here->ctx.attrs[a.name] : Json();
      for (const Json& alt : attr_candidates(a, cur, m_c)) {
        auto v = matches(*here, a.name, alt);
        if (!v) continue;
        if (!there) {
          auto second = m_gen.generate_pinned(m_probe_seed, m_free_dims, m_c.value_transforms);
          there = second ? run_of(*second) : std::nullopt;
        }
        if (!*there || !matches(**there, a.name, alt)) continue;
        return make(a.name == "scale" ? "missing_scale"
                    : a.name == "eps" ? "eps_placement"
                                      : "wrong_constant",
                    "the output matches the reference computed with " + a.name + "=" +
                        attr_text(alt) + " instead of " +
                        (cur.is_null() ? std::string("its default") : attr_text(cur)) +
                        (a.type == "float" ? ": a wrong or missing constant"
                                           : ": the kernel ignores or mishandles '" + a.name + "'"),
                    {"max error " + fmt(v->max_error) + " against the reference with " + a.name +
                     "=" + attr_text(alt) + ", vs " + fmt(m_failing.verdict.max_error) +
                     " against the true one; a second case matches it too"});
      }
    }
    return std::nullopt;
  }

  // 6. Eps placement: the same case passes with eps = 0, where every placement of eps agrees
  // (1/sqrt(var + eps), 1/(sqrt(var) + eps), rsqrt(ss + eps) ...).
  std::optional<Diagnosis> eps_placement() {
    const Json& attrs = m_c.attrs;
    if (!attrs.is_object() || !attrs.contains("eps") || !attrs["eps"].is_number() ||
        attrs["eps"].get<double>() == 0.0)
      return std::nullopt;
    TestCase no_eps = m_c;
    no_eps.attrs["eps"] = 0.0;
    auto p = run_case(no_eps);
    if (!p || !*p) return std::nullopt;
    return make("eps_placement",
                "passes with eps=0 but fails with eps=" + attr_text(attrs["eps"]) +
                    ": eps is added in the wrong place",
                {"the same case with eps=0 passes"});
  }

  // 7. Shape probes on each free dim the caller did not restrict: a pass/fail boundary at a block.
  std::optional<Diagnosis> block_boundaries() {
    for (const auto& dd : m_schema.dims) {
      if (!dd.expr.empty() || !dd.values.empty() || m_options.dims.count(dd.name)) continue;
      if (auto d = block_boundary(dd)) return d;
    }
    return std::nullopt;
  }

  std::optional<Diagnosis> block_boundary(const DimDomain& dd) {
    // Only the probed dim is pinned: the others are drawn under the element budget.
    auto pin = [&](std::int64_t v) { return Dims{{dd.name, v}}; };
    std::map<std::int64_t, std::optional<bool>> seen;
    auto at = [&](std::int64_t v) {
      auto it = seen.find(v);
      if (it == seen.end()) it = seen.emplace(v, passes(*m_shape_gen, pin(v))).first;
      return it->second;
    };
    // Online rescale or lost partial results: constant values keep a running max (and any other
    // value-dependent state) the same in every block, so only the former passes with ones.
    auto past_one_block = [&](std::string where, std::int64_t fails_at, std::int64_t fails_too) {
      auto ones_a = run_one(*m_shape_gen, m_c.seed, pin(fails_at), m_ones);
      auto ones_b = fails_too ? run_one(*m_shape_gen, m_c.seed, pin(fails_too), m_ones) : ones_a;
      if (ones_a && *ones_a && ones_b && *ones_b)
        return make("online_rescale",
                    "fails only when " + dd.name +
                        " exceeds one block and the values vary between blocks: the running state "
                        "carried across blocks (the online-softmax rescale by exp(m_old - m_new)) "
                        "is not updated",
                    {std::move(where),
                     "with constant values (ones) " + dim_eq(dd.name, fails_at) + " passes"});
      return make("accumulation",
                  "fails once " + dd.name +
                      " exceeds one block, even with constant values: partial results across "
                      "blocks are overwritten or dropped",
                  {std::move(where), "with constant values (ones) it still fails"});
    };
    std::int64_t largest_pass = 0, first_fail = 0;  // of the scan, while everything passes
    for (std::int64_t b : k_blocks) {
      if (b + 1 > dd.max || b < dd.min) continue;
      auto p_b1 = at(b + 1);
      if (p_b1 && *p_b1) {
        if (!first_fail) largest_pass = b + 1;
        continue;
      }
      if (!p_b1) continue;
      auto p_b = at(b);
      if (!first_fail && p_b) first_fail = *p_b ? b + 1 : b;
      if (!p_b || !*p_b) continue;
      // b passes, b+1 fails. Tail mask: 2b passes too. Past one block: 2b fails as well.
      auto p_2b = 2 * b <= dd.max ? at(2 * b) : std::nullopt;
      if (p_2b && *p_2b)
        return make("tail_mask",
                    "fails when " + dd.name + " is not a multiple of " + std::to_string(b) +
                        ": the last partial tile of " + dd.name +
                        " is not masked (or not computed)",
                    {dim_eq(dd.name, b) + " and " + dim_eq(dd.name, 2 * b) + " pass, " +
                     dim_eq(dd.name, b + 1) + " fails"});
      auto p_half = b / 2 + 1 >= dd.min ? at(b / 2 + 1) : std::nullopt;
      if (p_half && *p_half)
        return past_one_block(
            dd.name + "<=" + std::to_string(b) + " passes, " + dim_eq(dd.name, b + 1) +
                (p_2b ? " and " + dim_eq(dd.name, 2 * b) : std::string()) + " fail",
            b + 1, p_2b ? 2 * b : 0);
    }
    // No clean boundary, but everything up to some size passed and a larger one fails grossly
    // (far beyond rounding), and twice that size fails too: the state across blocks goes wrong
    // past a block, and b+1 passed only because its one extra element did not matter (a running
    // max that did not rise there).
    if (!largest_pass || first_fail <= largest_pass || 2 * first_fail > dd.max) return std::nullopt;
    auto p_twice = at(2 * first_fail);
    if (!p_twice || *p_twice) return std::nullopt;
    std::optional<double> dev;
    for (std::uint64_t seed : {m_c.seed, m_probe_seed})
      if (!dev)
        if (auto pc = m_shape_gen->generate_pinned(seed, pin(first_fail), m_c.value_transforms))
          dev = failing_deviation(*pc);
    if (!dev || *dev < k_close_deviation) return std::nullopt;
    return past_one_block(dd.name + "<=" + std::to_string(largest_pass) + " passes, " +
                              dim_eq(dd.name, first_fail) + " and " +
                              dim_eq(dd.name, 2 * first_fail) + " fail (median |out/ref - 1| " +
                              fmt(*dev) + ")",
                          first_fail, 2 * first_fail);
  }

  // 8. A near-constant out/ref ratio, the same on a second case: a missing scale or normalisation.
  std::optional<Diagnosis> constant_ratio() {
    struct Ratio {
      double med = 0, lo = 0, hi = 0;
      std::size_t count = 0;
    };
    auto ratio_of = [&](const TestCase& tc) -> std::optional<Ratio> {
      auto out = m_kernel(tc);
      if (!out || out->empty()) return std::nullopt;
      auto ctx = case_ref_context(m_schema, tc);
      if (!ctx) return std::nullopt;
      auto ref = run_reference(m_schema, *ctx);
      if (!ref || ref->empty() || (*out)[0].shape() != (*ref)[0].shape) return std::nullopt;
      auto o = (*out)[0].to_f64();
      const auto& r = (*ref)[0].value;
      double rmax = 0;
      for (double x : r)
        if (std::isfinite(x)) rmax = std::max(rmax, std::fabs(x));
      std::vector<double> ratios;
      for (std::size_t i = 0; i < o.size(); ++i)
        if (std::isfinite(o[i]) && std::isfinite(r[i]) && std::fabs(r[i]) > 1e-3 * rmax &&
            r[i] != 0)
          ratios.push_back(o[i] / r[i]);
      if (ratios.size() < 2) return std::nullopt;
      std::sort(ratios.begin(), ratios.end());
      return Ratio{ratios[ratios.size() / 2], ratios[ratios.size() / 10],
                   ratios[ratios.size() - 1 - ratios.size() / 10], ratios.size()};
    };
    auto constant = [](const Ratio& x) {
      return x.med != 0 && std::fabs(x.med - 1.0) > 0.02 &&
             std::fabs(x.hi - x.lo) < 0.02 * std::fabs(x.med);
    };
    auto first = ratio_of(m_c);
    if (!first || !constant(*first)) return std::nullopt;
    auto second_case = m_gen.generate_pinned(m_probe_seed, m_free_dims, m_c.value_transforms);
    auto second = second_case ? ratio_of(*second_case) : std::nullopt;
    if (!second || !constant(*second) || std::fabs(second->med / first->med - 1.0) >= 0.02)
      return std::nullopt;
    return make("missing_scale",
                "output = " + fmt(first->med) + " x reference" + name_ratio(first->med, m_c) +
                    ": a missing or wrong scale factor or normalisation",
                {"out/ref ratio over " + std::to_string(first->count) + " elements in [" +
                 fmt(first->lo) + ", " + fmt(first->hi) + "], the same on a second case"});
  }

  // 9. Magnitude: a case whose failure comes and goes with the size of its values. Scaled down (by
  // 16 or more, to within +-4) it passes; scaled up (by up to 256, staying 16x inside the dtype) it
  // returns Inf/NaN where the reference is finite, beyond the verdict's indeterminate elements
  // (where a correct kernel's intermediates may overflow): an overflow (exp without the max
  // subtraction), even when the failing case itself stayed finite. A wrong formula, operand or
  // index fails scaled down too.
  std::optional<Diagnosis> overflow_at_scale() {
    auto scalable = [&](const InputSpec& in) {
      auto it = m_c.inputs.find(in.name);
      return in.domain == "real" && it != m_c.inputs.end() && is_floating(it->second.dtype());
    };
    double up = 256.0, down = 1.0 / 16;
    bool any = false;
    for (const auto& in : m_schema.inputs) {
      if (!scalable(in)) continue;
      const Tensor& t = m_c.inputs.at(in.name);
      double amax = 0;
      for (double x : t.to_f64())
        if (std::isfinite(x)) amax = std::max(amax, std::fabs(x));
      if (amax > 0) {
        up = std::min(
            up, std::exp2(std::floor(std::log2(dtype_info(t.dtype()).max_finite / (16 * amax)))));
        down = std::min(down, std::exp2(std::floor(std::log2(4 / amax))));
      }
      any = true;
    }
    if (!any || up < 4) return std::nullopt;
    auto scaled = [&](double factor) {
      TestCase sc = m_c;
      for (const auto& in : m_schema.inputs) {
        if (!scalable(in)) continue;
        Tensor& t = sc.inputs.at(in.name);
        std::vector<double> v = t.to_f64();
        for (double& x : v) x = round_to(t.dtype(), x * factor);
        t = Tensor::from_values(t.dtype(), t.shape(), v);
      }
      return m_engine.run_case(m_schema.name, m_gen.options(), sc, m_kernel);
    };
    auto small = scaled(down);
    if (!small || !small->kernel_error.empty() || !small->verdict.passed) return std::nullopt;
    auto large = scaled(up);
    if (!large || !large->kernel_error.empty()) return std::nullopt;
    for (const auto& o : large->verdict.outputs)
      if (o.nonfinite_mismatch > 0)
        return make("overflow",
                    "fails with large values, passes with small ones, and returns Inf/NaN where "
                    "the reference is finite when scaled up: an overflow (e.g. exp without the max "
                    "subtraction)",
                    {"real inputs scaled by " + fmt(down) + " pass",
                     "scaled by " + fmt(up) + ": " + o.message});
    return std::nullopt;
  }

  // 10. Length: the case fails at a reduction length and passes 16x shorter, or fails there with a
  // 4x smaller error (the worst of three seeds each), with no block boundary in between (rule 7):
  // lost precision grows with the number of terms (or partial sums are lost), where a wrong
  // constant fails alike at any length.
  std::optional<Diagnosis> length() {
    // In the case's dtype, then where the shape probes run (float32) if that differs: an fp16
    // accumulator passes a short fp16 reduction, where a float32 version may keep a bf16 one.
    std::vector<const CaseGenerator*> gens = {&m_gen};
    if (m_shape_gen != &m_gen) gens.push_back(m_shape_gen);
    for (const auto& name : m_schema.reduced_dims) {
      const DimDomain* dd = m_schema.find_dim(name);
      if (!dd || !dd->expr.empty() || m_options.dims.count(name)) continue;
      const std::int64_t n = m_c.dims.at(name), lo = std::max<std::int64_t>(dd->min, 1);
      const std::int64_t n_long = n >= 32 ? n : std::min(16 * n, dd->max);
      const std::int64_t n_short = n >= 32 ? std::max(n / 16, lo) : n;
      if (n_long < 2 * n_short) continue;
      for (const CaseGenerator* g : gens) {
        auto max_error_at = [&](std::int64_t len) -> std::optional<double> {
          double worst = 0;
          Dims dims = m_free_dims;
          dims[name] = len;
          for (std::uint64_t seed : {m_c.seed, m_probe_seed, derive_seed(m_c.seed, "probe2")}) {
            auto pc = g->generate_pinned(seed, dims, m_c.value_transforms);
            if (!pc) return std::nullopt;
            auto r = m_engine.run_case(m_schema.name, m_gen.options(), *pc, m_kernel);
            if (!r || !r->kernel_error.empty()) return std::nullopt;
            worst = std::max(worst, r->verdict.max_error);
          }
          return worst;
        };
        const double env = envelope(g->options().dtypes.front());
        auto e_short = max_error_at(n_short), e_long = max_error_at(n_long);
        if (e_short && e_long && *e_long > env &&
            (*e_short <= env ? *e_long >= 2.0 * *e_short
                             : std::isfinite(*e_long) && *e_long >= 4.0 * *e_short))
          return make(
              "accumulation",
              "the error grows with the reduction length " + name +
                  ": an accumulator kept in low precision (or partial sums lost)",
              {"in " + std::string(dtype_name(g->options().dtypes.front())) + ", fails at " +
               dim_eq(name, n_long) + " (max error " + fmt(*e_long) + "), and at " +
               dim_eq(name, n_short) + " max error " + fmt(*e_short) + ", three seeds each"});
      }
    }
    return std::nullopt;
  }

  // 11. A wrong constant in an elementwise formula: no tile, layout, precision, scale, attr or
  // length explains the failure, yet the output stays close to the reference (a small relative
  // deviation, where a wrong operand, index or mask is off by O(1)), on this case and on an
  // independent one. In float32 where the bug shows there: low precision fails only where the
  // constant matters most (gelu's far tail), float32 at every element. Not for ops that reduce:
  // there a small deviation is as likely lost precision, which rules 4 and 10 could not pin down.
  std::optional<Diagnosis> formula_constant() {
    if (m_nonfinite || !m_schema.reduced_dims.empty()) return std::nullopt;
    auto wide = in_shape_dtype();
    auto here = wide ? failing_deviation(*wide) : std::nullopt;
    if (!here || *here >= k_close_deviation) return std::nullopt;
    auto other_case = m_shape_gen->generate_pinned(m_probe_seed, {}, m_c.value_transforms);
    auto there = other_case ? failing_deviation(*other_case) : std::nullopt;
    if (!there || *there >= k_close_deviation) return std::nullopt;
    return make("wrong_constant",
                "the output tracks the reference but is systematically off (median relative "
                "deviation " +
                    fmt(*here) +
                    " where it fails), at any shape: a wrong constant or approximation in the "
                    "formula",
                {"median |out/ref - 1| over the failing elements: " + fmt(*here) + " here, " +
                     fmt(*there) + " on an independent case",
                 "no tile boundary, layout, precision, scale, attr or length explains it"});
  }

  const Engine& m_engine;
  const OpSchema& m_schema;
  const FuzzOptions& m_options;
  const CaseResult& m_failing;
  const TestCase& m_c;
  const KernelRunner& m_kernel;
  const CaseGenerator m_gen;
  std::optional<CaseGenerator> m_gen32;
  const CaseGenerator* m_shape_gen = &m_gen;  // where the shape probes run
  const std::uint64_t m_probe_seed;
  const OutputVerdict* m_nonfinite = nullptr;  // the first output with non-finite mismatches
  Transforms m_ones;
  Dims m_free_dims;
};

}  // namespace

Diagnosis Engine::diagnose(const std::string& op, const FuzzOptions& options,
                           const CaseResult& failing, const KernelRunner* kernel) const {
  auto schema = m_catalogue->get(op);
  if (!schema) return make("no_pattern", "no pattern (unknown op)");
  if (!failing.kernel_error.empty()) {
    if (auto d = signature_diagnosis(*this, **schema, options, failing.test_case, failing.kernel_error, kernel))
      return *d;
    return make("kernel_error", "the kernel raised an error", {failing.kernel_error});
  }
  for (const auto& o : failing.verdict.outputs)
    if (o.message.rfind("shape mismatch", 0) == 0 || o.message.rfind("dtype mismatch", 0) == 0)
      return make("contract", o.message);
  if (!kernel) return Probes::static_only(failing);
  return Probes(*this, **schema, options, failing, *kernel).run();
}

}  // namespace gpuemu
