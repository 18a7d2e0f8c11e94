#include "fuzz/shape_sampler.hpp"
#include "fuzz/values.hpp"
#include "gpuemu/engine/strided.hpp"
#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/rng.hpp"

#include <algorithm>

namespace gpuemu {

std::string_view distribution_name(Distribution d) {
  switch (d) {
    case Distribution::regular: return "regular";
    case Distribution::boundary: return "boundary";
    case Distribution::adversarial: return "adversarial";
    case Distribution::special: return "special";
  }
  return "adversarial";
}

std::optional<Distribution> parse_distribution(std::string_view name) {
  for (auto d : {Distribution::regular, Distribution::boundary, Distribution::adversarial,
                 Distribution::special})
    if (distribution_name(d) == name) return d;
  return std::nullopt;
}

std::uint64_t case_seed(std::uint64_t master_seed, std::int64_t index) {
  return derive_seed(master_seed, "case:" + std::to_string(index));
}

Result<RefContext> case_ref_context(const OpSchema& schema, const TestCase& c) {
  GPUEMU_TRY(RefContext ctx, make_ref_context(schema, c.inputs, c.attrs, c.dtype));
  ctx.dims = c.dims;
  ctx.operand_roundoff = policy_operand_roundoff(c.precision, c.dtype);
  ctx.operand_overflow = policy_operand_overflow(c.precision, c.dtype);
  ctx.operand_floor = policy_operand_floor(c.precision, c.dtype);
  return ctx;
}

Json TestCase::describe(bool digests) const {
  Json j;
  j["op"] = op;
  j["index"] = index;
  j["seed"] = seed;
  j["master_seed"] = master_seed;
  j["dtype"] = std::string(dtype_name(dtype));
  j["distribution"] = std::string(distribution_name(distribution));
  j["dims"] = Json::object();
  for (const auto& [k, v] : dims) j["dims"][k] = v;
  j["attrs"] = attrs;
  if (precision != PrecisionPolicy::ieee) j["precision"] = std::string(precision_name(precision));
  j["inputs"] = Json::object();
  for (const auto& [name, t] : inputs) {
    Json in;
    in["dtype"] = std::string(dtype_name(t.dtype()));
    in["shape"] = t.shape();
    in["strides"] = t.strides();
    in["offset"] = t.offset();
    auto lay = layouts.find(name);
    in["layout"] = lay == layouts.end() ? "contiguous" : lay->second.kind;
    if (digests) in["digest"] = tensor_digest(t);
    if (auto tr = value_transforms.find(name); tr != value_transforms.end()) in["values"] = tr->second;
    j["inputs"][name] = in;
  }
  return j;
}

CaseGenerator::CaseGenerator(const OpSchema& schema, FuzzOptions options)
    : m_schema(schema), m_options(std::move(options)) {}

Status CaseGenerator::validate() const {
  for (const auto& [name, sizes] : m_options.dims) {
    if (!m_schema.find_dim(name)) {
      std::string known;
      for (const auto& d : m_schema.dims) known += (known.empty() ? "" : ", ") + d.name;
      return make_error(ErrorCode::invalid_argument,
                        "op '" + m_schema.name + "' has no dim '" + name + "' (dims: " + known + ")");
    }
    if (sizes.empty()) return make_error(ErrorCode::invalid_argument, "dim '" + name + "' restricted to no sizes");
    const DimDomain& dd = *m_schema.find_dim(name);
    // A dim's min is a floor (N=0 would make every case empty: a run that tests nothing); its max
    // is only the sampler's domain, and pinning past it (a vocabulary-sized row) is legitimate.
    const std::int64_t floor = dd.expr.empty() && dd.values.empty() ? dd.min : 0;
    for (auto v : sizes)
      if (v < floor || v < 0)
        return make_error(ErrorCode::invalid_argument,
                          "dim '" + name + "' of op '" + m_schema.name + "' must be >= " +
                              std::to_string(std::max<std::int64_t>(floor, 0)) + ", got " + std::to_string(v) +
                              (floor > 0 ? " (the schema's domain starts at " + std::to_string(floor) + ")" : ""));
  }
  for (const auto& [name, on] : m_options.present) {
    const InputSpec* in = m_schema.find_input(name);
    if (!in) {
      std::string known;
      for (const auto& i : m_schema.inputs) known += (known.empty() ? "" : ", ") + i.name;
      return make_error(ErrorCode::invalid_argument,
                        "op '" + m_schema.name + "' has no input '" + name + "' (inputs: " + known + ")");
    }
    if (!in->optional && !on)
      return make_error(ErrorCode::invalid_argument, "input '" + name + "' of op '" + m_schema.name +
                                                         "' is required: it cannot be pinned absent");
  }
  // Every policy named must exist (keys naming other ops are for their runs: a gpuemu.toml may
  // share one map); the policy this op resolves to must be one it can take.
  for (const auto& [key, value] : m_options.precision)
    if (!parse_precision(value)) {
      std::string names;
      for (const auto& [p, _] : precision_policies()) names += (names.empty() ? "" : ", ") + std::string(precision_name(p));
      return make_error(ErrorCode::invalid_argument,
                        "precision '" + key + "': unknown policy '" + value + "' (policies: " + names + ")");
    }
  GPUEMU_TRY(PrecisionPolicy policy, resolve_precision(m_options.precision, m_schema));
  (void)policy;
  GPUEMU_TRY(AttrMap resolved, m_schema.resolve_attrs(m_options.attrs));
  GPUEMU_TRY_STATUS(m_schema.check_dim_attrs(resolved, [&resolved](const InputSpec& in) {
    return static_cast<std::int64_t>(in.shape_for(resolved).size());  // the fuzzer draws the schema's rank
  }));
  for (const auto& a : m_options.vary_attrs)
    if (!m_schema.find_attr(a)) return make_error(ErrorCode::invalid_argument, "op '" + m_schema.name + "' has no attr '" + a + "'");
  for (auto d : m_options.dtypes)
    if (std::find(m_schema.dtypes.begin(), m_schema.dtypes.end(), d) == m_schema.dtypes.end()) {
      std::string allowed;
      for (auto x : m_schema.dtypes) allowed += (allowed.empty() ? "" : ", ") + std::string(dtype_name(x));
      return make_error(ErrorCode::invalid_argument, "op '" + m_schema.name + "' does not take dtype " +
                                                         std::string(dtype_name(d)) + " (it takes " + allowed + ")");
    }
  return {};
}

namespace {

// Chooses a layout for an input of logical `shape` and builds its storage and view.
struct Materialised {
  Tensor tensor;
  InputLayout layout;
};

Materialised materialise(DType dtype, const Shape& shape, const std::string& kind, Rng& rng,
                         const std::vector<double>& values_for_expand_base,
                         const std::function<std::vector<double>(const Shape&)>& make_values) {
  Materialised m;
  const auto rank = static_cast<std::int64_t>(shape.size());
  auto fill = [&](Tensor& t, const std::vector<double>& v) {
    encode_strided(t.dtype(), v.data(), t.shape(), t.strides(),
                   t.storage()->data() + t.offset() * static_cast<std::int64_t>(dtype_size(t.dtype())));
  };
  (void)values_for_expand_base;
  if (kind == "transposed" && rank >= 2 && shape[rank - 1] > 1 && shape[rank - 2] > 1) {
    Shape stored = shape;
    std::swap(stored[rank - 1], stored[rank - 2]);
    Tensor base = Tensor::zeros(dtype, stored);
    m.tensor = base.transpose(-1, -2);
    fill(m.tensor, make_values(shape));
    m.layout.kind = "transposed";
    return m;
  }
  if (kind == "strided" && rank >= 1 && shape[rank - 1] > 1) {
    const std::int64_t step = 2 + static_cast<std::int64_t>(rng.bounded(2));
    Shape stored = shape;
    stored[rank - 1] = shape[rank - 1] * step;
    Tensor base = Tensor::zeros(dtype, stored);
    m.tensor = base.slice(-1, 0, stored[rank - 1], step);
    fill(m.tensor, make_values(shape));
    m.layout = {"strided", step};
    return m;
  }
  if (kind == "offset" && shape_numel(shape) > 0) {
    const std::int64_t offset = 1 + static_cast<std::int64_t>(rng.bounded(15));
    auto storage = std::make_shared<std::vector<std::byte>>(
        static_cast<std::size_t>(shape_numel(shape) + offset) * dtype_size(dtype));
    m.tensor = Tensor::view(dtype, shape, contiguous_strides(shape), offset, storage).value();
    fill(m.tensor, make_values(shape));
    m.layout = {"offset", offset};
    return m;
  }
  if (kind == "expanded" && rank >= 1) {
    // Expand along the first dim larger than 1: values repeat along it (stride 0).
    for (std::int64_t d = 0; d < rank; ++d) {
      if (shape[d] <= 1) continue;
      Shape small = shape;
      small[d] = 1;
      Tensor base = Tensor::from_values(dtype, small, make_values(small));
      m.tensor = base.expand(shape).value();
      m.layout = {"expanded", d};
      return m;
    }
  }
  m.tensor = Tensor::from_values(dtype, shape, make_values(shape));
  return m;
}

}  // namespace

Result<TestCase> CaseGenerator::generate(std::uint64_t master_seed, std::int64_t index) const {
  auto c = generate_pinned(case_seed(master_seed, index), {}, {});
  if (c) {
    c->master_seed = master_seed;
    c->index = index;
  }
  return c;
}

Result<TestCase> CaseGenerator::generate_from_seed(std::uint64_t seed) const {
  return generate_pinned(seed, {}, {});
}

Result<TestCase> CaseGenerator::generate_pinned(
    std::uint64_t seed, const std::map<std::string, std::int64_t, std::less<>>& pinned,
    const std::map<std::string, std::string, std::less<>>& transforms, bool contiguous_only) const {
  TestCase c;
  c.op = m_schema.name;
  c.seed = seed;
  c.distribution = m_options.distribution;
  c.value_transforms = transforms;
  GPUEMU_TRY(c.precision, resolve_precision(m_options.precision, m_schema));

  // dtype
  std::vector<DType> dtypes = m_options.dtypes.empty() ? m_schema.dtypes : m_options.dtypes;
  Rng dtype_rng = Rng::substream(seed, "dtype");
  c.dtype = dtypes[dtype_rng.bounded(dtypes.size())];

  // attrs: pinned ones as given, varied ones from their domain, the rest at their defaults.
  GPUEMU_TRY(c.attrs, m_schema.resolve_attrs(m_options.attrs));
  for (const auto& a : m_schema.attrs) {
    const bool asked = std::find(m_options.vary_attrs.begin(), m_options.vary_attrs.end(), a.name) !=
                       m_options.vary_attrs.end();
    const bool pinned_by_caller = m_options.attrs.is_object() && m_options.attrs.contains(a.name);
    if (pinned_by_caller || !(asked || !a.semantic) || a.values.empty()) continue;
    Rng attr_rng = Rng::substream(seed, "attr:" + a.name);
    c.attrs[a.name] = a.values[attr_rng.bounded(a.values.size())];
  }

  ShapeSampler sampler(m_schema, m_options);
  GPUEMU_TRY(c.dims, sampler.sample(seed, c.attrs, pinned));

  for (const auto& spec : m_schema.inputs) {
    if (spec.optional) {
      // Drawn from its own substream whether or not the caller pins it, so pinning one input
      // leaves every other draw of the case unchanged.
      Rng presence = Rng::substream(seed, "present:" + spec.name);
      const bool drawn_absent = presence.chance(1, 4);
      const bool absent = spec.presence == InputPresence::drawn ? drawn_absent
                                                                : spec.presence == InputPresence::when_pinned;
      auto pin = m_options.present.find(spec.name);
      if (pin != m_options.present.end() ? !pin->second : absent) continue;
    }
    Shape shape;
    for (const auto& e : spec.shape_for(c.attrs)) {
      GPUEMU_TRY(std::int64_t v, eval_expr(e, c.dims, c.attrs));
      if (v < 0) return make_error(ErrorCode::invalid_argument, "input '" + spec.name + "' gets a negative size from '" + e + "'");
      shape.push_back(v);
    }
    DType dtype = c.dtype;
    if (spec.dtype_rule == InputDtypeRule::fixed) {
      Rng drng = Rng::substream(seed, "dtype:" + spec.name);
      dtype = spec.dtypes[drng.bounded(spec.dtypes.size())];
    }
    ValueRequest req;
    req.schema = &m_schema;
    req.spec = &spec;
    req.dtype = dtype;
    req.distribution = m_options.distribution;
    req.attrs = &c.attrs;
    if (auto colon = spec.domain.find(':'); colon != std::string::npos) {
      GPUEMU_TRY(req.bound, eval_expr(spec.domain.substr(colon + 1), c.dims, c.attrs));
    }
    std::string layout = "contiguous";
    if (m_options.layouts && !contiguous_only && !spec.layouts.empty()) {
      Rng lrng = Rng::substream(seed, "layout:" + spec.name);
      if (lrng.chance(1, 2)) layout = spec.layouts[lrng.bounded(spec.layouts.size())];
    }
    auto transform = transforms.find(spec.name);
    auto make_values = [&](const Shape& s) {
      ValueRequest r = req;
      r.shape = s;
      r.pattern_seed = derive_seed(seed, "pattern:" + spec.name);
      Rng vrng = Rng::substream(seed, "input:" + spec.name);
      auto v = generate_values(r, vrng);
      if (transform != transforms.end()) v = transform_values(transform->second, std::move(v), dtype);
      return v;
    };
    Rng layout_rng = Rng::substream(seed, "layout-param:" + spec.name);
    Materialised m = materialise(dtype, shape, layout, layout_rng, {}, make_values);
    c.inputs.emplace(spec.name, std::move(m.tensor));
    c.layouts.emplace(spec.name, m.layout);
  }
  Rng joint_rng = Rng::substream(seed, "joint");
  draw_jointly(m_schema, c, joint_rng);
  derive_saved(m_schema, c);
  return c;
}

}  // namespace gpuemu
