// Test cases and fuzz options on the wire, and the exact input snapshot a failure keeps
// (docs/protocol.md, "Cases").
#include "gpuemu/protocol/protocol.hpp"

namespace gpuemu::protocol {
namespace {

Error bad(std::string message) {
  return make_error(ErrorCode::invalid_argument, std::move(message));
}

template <class T>
Result<T> get_as(const Json& j, const char* field, T fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const Json::exception&) {
    return bad(std::string("'") + field + "' has the wrong type");
  }
}

}  // namespace

Json options_to_json(const FuzzOptions& o) {
  Json j;
  j["dtypes"] = Json::array();
  for (DType d : o.dtypes) j["dtypes"].push_back(std::string(dtype_name(d)));
  j["distribution"] = std::string(distribution_name(o.distribution));
  j["dims"] = Json::object();
  for (const auto& [k, v] : o.dims) j["dims"][k] = v;
  j["attrs"] = o.attrs.is_null() ? Json::object() : o.attrs;
  j["vary_attrs"] = o.vary_attrs;
  j["layouts"] = o.layouts;
  j["element_budget_scale"] = o.element_budget_scale;
  if (!o.present.empty()) {
    j["present"] = Json::object();
    for (const auto& [k, v] : o.present) j["present"][k] = v;
  }
  if (!o.precision.empty()) {
    j["precision"] = Json::object();
    for (const auto& [k, v] : o.precision) j["precision"][k] = v;
  }
  return j;
}

Result<FuzzOptions> options_from_json(const Json& j) {
  FuzzOptions o;
  if (j.is_null()) return o;
  if (!j.is_object()) return bad("'options' must be an object");
  GPUEMU_TRY(auto dtypes, get_as<std::vector<std::string>>(j, "dtypes", {}));
  for (const auto& d : dtypes) {
    auto dt = parse_dtype(d);
    if (!dt) return bad("unknown dtype '" + d + "'");
    o.dtypes.push_back(*dt);
  }
  GPUEMU_TRY(auto dist, get_as<std::string>(j, "distribution", "adversarial"));
  auto pd = parse_distribution(dist);
  if (!pd)
    return bad("unknown value distribution '" + dist +
               "' (regular, boundary, adversarial, special)");
  o.distribution = *pd;
  GPUEMU_TRY(auto dims, (get_as<std::map<std::string, std::vector<std::int64_t>>>(j, "dims", {})));
  for (auto& [k, v] : dims) o.dims[k] = std::move(v);
  if (j.contains("attrs") && !j["attrs"].is_null()) {
    if (!j["attrs"].is_object()) return bad("'attrs' must be an object");
    o.attrs = j["attrs"];
  }
  GPUEMU_TRY(o.vary_attrs, get_as<std::vector<std::string>>(j, "vary_attrs", {}));
  GPUEMU_TRY(o.layouts, get_as<bool>(j, "layouts", true));
  GPUEMU_TRY(o.element_budget_scale, get_as<double>(j, "element_budget_scale", 1.0));
  if (!(o.element_budget_scale > 0.0) || o.element_budget_scale > 64.0)
    return bad("'element_budget_scale' must be in (0, 64]");
  GPUEMU_TRY(auto present, (get_as<std::map<std::string, bool>>(j, "present", {})));
  for (auto& [k, v] : present) o.present[k] = v;
  GPUEMU_TRY(auto precision, (get_as<std::map<std::string, std::string>>(j, "precision", {})));
  for (auto& [k, v] : precision) o.precision[k] = std::move(v);
  return o;
}

Json case_to_json(const TestCase& c, bool digests) {
  Json j = c.describe(digests);
  for (auto& [name, in] : j["inputs"].items()) {
    auto lay = c.layouts.find(name);
    in["layout_param"] = lay == c.layouts.end() ? 0 : lay->second.param;
  }
  return j;
}

void add_case_tensors(Frame& frame, const TestCase& c, const std::string& prefix) {
  for (const auto& [name, t] : c.inputs) frame.add(prefix + name, t);
}

Result<TestCase> case_from_frame(const Json& j, const Frame& frame, const std::string& prefix) {
  if (!j.is_object()) return bad("'case' must be an object");
  TestCase c;
  GPUEMU_TRY(c.op, get_as<std::string>(j, "op", ""));
  GPUEMU_TRY(c.seed, get_as<std::uint64_t>(j, "seed", 0));
  GPUEMU_TRY(c.master_seed, get_as<std::uint64_t>(j, "master_seed", 0));
  GPUEMU_TRY(c.index, get_as<std::int64_t>(j, "index", 0));
  GPUEMU_TRY(auto dt, get_as<std::string>(j, "dtype", "float32"));
  auto pdt = parse_dtype(dt);
  if (!pdt) return bad("unknown dtype '" + dt + "'");
  c.dtype = *pdt;
  GPUEMU_TRY(auto dist, get_as<std::string>(j, "distribution", "adversarial"));
  c.distribution = parse_distribution(dist).value_or(Distribution::adversarial);
  GPUEMU_TRY(auto dims, (get_as<std::map<std::string, std::int64_t>>(j, "dims", {})));
  for (auto& [k, v] : dims) c.dims[k] = v;
  c.attrs = j.contains("attrs") && j["attrs"].is_object() ? j["attrs"] : Json::object();
  GPUEMU_TRY(auto precision, get_as<std::string>(j, "precision", "ieee"));
  auto policy = parse_precision(precision);
  if (!policy) return bad("unknown precision policy '" + precision + "'");
  c.precision = *policy;
  const Json inputs = j.value("inputs", Json::object());
  if (!inputs.is_object()) return bad("'inputs' must be an object");
  for (const auto& [name, in] : inputs.items()) {
    GPUEMU_TRY(Tensor t, frame.tensor(prefix + name));
    c.inputs.emplace(name, std::move(t));
    InputLayout lay;
    if (in.is_object()) {
      lay.kind = in.value("layout", "contiguous");
      lay.param = in.value("layout_param", std::int64_t{0});
      if (in.contains("values") && in["values"].is_string())
        c.value_transforms[name] = in["values"].get<std::string>();
    }
    c.layouts[name] = lay;
  }
  // Tensors the header does not describe are inputs too (a client may send only tensors).
  for (const auto& [key, t] : frame.tensors)
    if (key.rfind(prefix, 0) == 0 && !c.inputs.count(key.substr(prefix.size())))
      c.inputs.emplace(key.substr(prefix.size()), t);
  return c;
}

std::vector<std::byte> snapshot_case(const TestCase& c) {
  Frame f;
  f.header = {{"snapshot", 1}, {"case", case_to_json(c)}};
  add_case_tensors(f, c);
  return encode(f);
}

Result<TestCase> restore_case(std::span<const std::byte> snapshot) {
  GPUEMU_TRY(Frame f, decode(snapshot));
  if (!f.header.contains("case"))
    return make_error(ErrorCode::protocol_error, "the snapshot holds no case");
  return case_from_frame(f.header["case"], f);
}

}  // namespace gpuemu::protocol
