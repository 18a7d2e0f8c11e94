// Parses and validates op schema documents (format: schemas/op.schema.json, docs/schemas.md).
// Every error names the file and the line of the offending key.
#include "gpuemu/engine/op_schema.hpp"
#include "schema/expr.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace gpuemu {
namespace {

// Finds the line of a key path in the source text, approximately: each key is searched as
// "key" after the previous one's position.
int line_of(const std::string& text, const std::vector<std::string>& path) {
  std::size_t pos = 0;
  for (const auto& key : path) {
    auto found = text.find("\"" + key + "\"", pos);
    if (found == std::string::npos) break;
    pos = found;
  }
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(pos), '\n'));
}

class SchemaReader {
 public:
  SchemaReader(const std::string& text, const std::string& file) : m_text(text), m_file(file) {}

  Error error(const std::vector<std::string>& path, const std::string& message) const {
    std::string where;
    for (const auto& p : path) where += (where.empty() ? "" : ".") + p;
    return make_error(ErrorCode::schema_error, m_file + ":" + std::to_string(line_of(m_text, path)) +
                                                   ": " + (where.empty() ? "" : where + ": ") + message);
  }

  Status check_keys(const Json& obj, const std::vector<std::string>& path,
                    std::initializer_list<const char*> allowed) const {
    if (!obj.is_object()) return error(path, "must be an object");
    for (const auto& [key, value] : obj.items()) {
      bool ok = false;
      for (const char* a : allowed) ok |= key == a;
      if (!ok) {
        auto p = path;
        p.push_back(key);
        return error(p, "unknown key '" + key + "'");
      }
    }
    return {};
  }

  Result<std::string> get_string(const Json& obj, const std::vector<std::string>& path,
                                 const char* key, bool required, std::string fallback = {}) const {
    auto p = path;
    p.push_back(key);
    if (!obj.contains(key)) {
      if (required) return error(path, std::string("missing required key '") + key + "'");
      return fallback;
    }
    if (!obj[key].is_string()) return error(p, "must be a string");
    return obj[key].get<std::string>();
  }

  Result<DType> get_dtype(const Json& v, const std::vector<std::string>& path) const {
    if (!v.is_string()) return error(path, "a dtype must be a string");
    auto d = parse_dtype(v.get<std::string>());
    if (!d || dtype_name(*d) != v.get<std::string>())
      return error(path, "unknown dtype '" + v.get<std::string>() + "'");
    return *d;
  }

  Status check_expr(const std::string& text, const std::vector<std::string>& path) const {
    auto e = Expr::parse(text);
    if (!e) return error(path, e.error().message);
    return {};
  }

  Result<OpSchema> read(const Json& doc) {
    OpSchema s;
    s.raw = doc;
    GPUEMU_TRY_STATUS(check_keys(doc, {}, {"$schema", "name", "version", "summary", "family", "dtypes",
                                           "dims", "inputs", "attrs", "outputs", "reduced_dims",
                                           "constraints", "max_elements", "max_work", "work",
                                           "reference", "notes"}));
    GPUEMU_TRY(s.name, get_string(doc, {}, "name", true));
    if (s.name.empty() || !std::islower(static_cast<unsigned char>(s.name[0])) ||
        !std::all_of(s.name.begin(), s.name.end(),
                     [](char c) { return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'; }))
      return error({"name"}, "must match ^[a-z][a-z0-9_]*$");
    if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"].get<int>() < 1)
      return error({"version"}, "must be an integer >= 1");
    s.version = doc["version"].get<int>();
    GPUEMU_TRY(s.summary, get_string(doc, {}, "summary", true));
    GPUEMU_TRY(s.family, get_string(doc, {}, "family", true));
    static const std::set<std::string> k_families = {
        "elementwise", "binary", "reduction", "scan", "softmax", "norm", "gemm", "attention",
        "rope", "conv", "loss", "gather", "quant", "custom"};
    if (!k_families.count(s.family)) return error({"family"}, "unknown family '" + s.family + "'");
    GPUEMU_TRY(s.reference, get_string(doc, {}, "reference", true));
    if (s.reference.rfind("builtin:", 0) != 0 && s.reference.rfind("script:", 0) != 0 &&
        s.reference.rfind("torch:", 0) != 0)
      return error({"reference"},
                   "must be 'builtin:<name>', 'script:<file>.py:<function>' or 'torch:<name>'");

    if (!doc.contains("dtypes") || !doc["dtypes"].is_array() || doc["dtypes"].empty())
      return error({"dtypes"}, "must be a non-empty list of dtype names");
    for (const auto& d : doc["dtypes"]) {
      GPUEMU_TRY(DType dt, get_dtype(d, {"dtypes"}));
      s.dtypes.push_back(dt);
    }
    GPUEMU_TRY_STATUS(read_dims(doc, s));
    GPUEMU_TRY_STATUS(read_inputs(doc, s));
    GPUEMU_TRY_STATUS(read_attrs(doc, s));
    GPUEMU_TRY_STATUS(read_outputs(doc, s));
    for (const char* key : {"reduced_dims", "constraints"}) {
      if (!doc.contains(key)) continue;
      if (!doc[key].is_array()) return error({key}, "must be a list of strings");
      for (const auto& v : doc[key]) {
        if (!v.is_string()) return error({key}, "must be a list of strings");
        auto str = v.get<std::string>();
        if (std::string(key) == "reduced_dims") {
          if (!s.find_dim(str)) return error({key, str}, "names no dim '" + str + "'");
          s.reduced_dims.push_back(str);
        } else {
          GPUEMU_TRY_STATUS(check_expr(str, {key}));
          s.constraints.push_back(str);
        }
      }
    }
    for (const char* key : {"max_elements", "max_work"}) {
      if (!doc.contains(key)) continue;
      if (!doc[key].is_number_integer() || doc[key].get<std::int64_t>() < 1)
        return error({key}, "must be a positive integer");
      (std::string(key) == "max_elements" ? s.max_elements : s.max_work) = doc[key].get<std::int64_t>();
    }
    if (doc.contains("work")) {
      if (!doc["work"].is_string()) return error({"work"}, "must be an expression string");
      s.work = doc["work"].get<std::string>();
      GPUEMU_TRY_STATUS(check_expr(s.work, {"work"}));
    }
    GPUEMU_TRY_STATUS(check_names(s));
    return s;
  }

 private:
  Status read_dims(const Json& doc, OpSchema& s) const {
    if (!doc.contains("dims") || !doc["dims"].is_object()) return error({"dims"}, "must be an object");
    static const std::set<std::string> k_roles = {"batch", "reduction", "sequence", "feature", "head",
                                                  "channel", "spatial", "vocab", "kernel"};
    for (const auto& [name, d] : doc["dims"].items()) {
      std::vector<std::string> p = {"dims", name};
      GPUEMU_TRY_STATUS(check_keys(d, p, {"min", "max", "values", "role", "expr", "description"}));
      DimDomain dim;
      dim.name = name;
      if (d.contains("expr")) {
        if (!d["expr"].is_string()) return error(p, "expr must be a string");
        dim.expr = d["expr"].get<std::string>();
        GPUEMU_TRY_STATUS(check_expr(dim.expr, p));
      }
      if (d.contains("values")) {
        if (!d["values"].is_array() || d["values"].empty()) return error(p, "values must be a non-empty list");
        for (const auto& v : d["values"]) {
          if (!v.is_number_integer() || v.get<std::int64_t>() < 0) return error(p, "values must be integers >= 0");
          dim.values.push_back(v.get<std::int64_t>());
        }
        dim.min = *std::min_element(dim.values.begin(), dim.values.end());
        dim.max = *std::max_element(dim.values.begin(), dim.values.end());
      }
      for (const char* key : {"min", "max"}) {
        if (!d.contains(key)) continue;
        if (!d[key].is_number_integer() || d[key].get<std::int64_t>() < 0)
          return error(p, std::string(key) + " must be an integer >= 0");
        (std::string(key) == "min" ? dim.min : dim.max) = d[key].get<std::int64_t>();
      }
      if (dim.expr.empty() && dim.values.empty() && !d.contains("max"))
        return error(p, "a free dim needs 'max' (or 'values'), a derived one 'expr'");
      if (dim.min > dim.max) return error(p, "min is larger than max");
      if (d.contains("role")) {
        if (!d["role"].is_string() || !k_roles.count(d["role"].get<std::string>()))
          return error(p, "unknown role");
        dim.role = d["role"].get<std::string>();
      }
      s.dims.push_back(std::move(dim));
    }
    return {};
  }

  // A shape: a list of dim names, integer expressions or integers.
  Result<std::vector<std::string>> read_shape(const Json& shape, const std::vector<std::string>& p) const {
    if (!shape.is_array()) return error(p, "shape must be a list");
    std::vector<std::string> out;
    for (const auto& e : shape) {
      if (e.is_number_integer()) out.push_back(std::to_string(e.get<std::int64_t>()));
      else if (e.is_string()) {
        GPUEMU_TRY_STATUS(check_expr(e.get<std::string>(), p));
        out.push_back(e.get<std::string>());
      } else return error(p, "shape entries must be dim names, expressions or integers");
    }
    return out;
  }

  Status read_inputs(const Json& doc, OpSchema& s) const {
    if (!doc.contains("inputs") || !doc["inputs"].is_array() || doc["inputs"].empty())
      return error({"inputs"}, "must be a non-empty list");
    for (const auto& in : doc["inputs"]) {
      if (!in.is_object()) return error({"inputs"}, "entries must be objects");
      std::vector<std::string> p = {"inputs", in.value("name", std::string("?"))};
      GPUEMU_TRY_STATUS(check_keys(in, p, {"name", "shape", "shape_when", "dtype", "domain", "optional", "presence", "layouts", "any_leading_dims", "values", "description"}));
      InputSpec spec;
      GPUEMU_TRY(spec.name, get_string(in, p, "name", true));
      if (!in.contains("shape")) return error(p, "shape must be a list");
      GPUEMU_TRY(spec.shape, read_shape(in["shape"], p));
      if (in.contains("shape_when")) {
        // {"<attr>": {"<value>": [shape], ...}}: one attr; its values are checked once attrs are read.
        const Json& sw = in["shape_when"];
        auto q = p;
        q.push_back("shape_when");
        if (!sw.is_object() || sw.size() != 1 || !sw.begin()->is_object() || sw.begin()->empty())
          return error(q, "shape_when must be {\"<attr>\": {\"<value>\": [shape], ...}}, naming one attr");
        spec.shape_attr = sw.begin().key();
        for (const auto& [value, shape] : sw.begin()->items()) {
          GPUEMU_TRY(auto entries, read_shape(shape, q));
          spec.shape_when.emplace(value, std::move(entries));
        }
      }
      if (!in.contains("dtype")) return error(p, "missing required key 'dtype'");
      const Json& dt = in["dtype"];
      if (dt.is_string() && dt.get<std::string>() == "case") {
        spec.dtype_rule = InputDtypeRule::case_dtype;
      } else {
        spec.dtype_rule = InputDtypeRule::fixed;
        if (dt.is_array()) {
          for (const auto& d : dt) {
            GPUEMU_TRY(DType x, get_dtype(d, p));
            spec.dtypes.push_back(x);
          }
        } else {
          GPUEMU_TRY(DType x, get_dtype(dt, p));
          spec.dtypes.push_back(x);
        }
        if (spec.dtypes.empty()) return error(p, "dtype list is empty");
      }
      GPUEMU_TRY(spec.domain, get_string(in, p, "domain", false, "real"));
      static const std::set<std::string> k_domains = {"real", "positive", "nonnegative",
                                                      "probabilities", "unit", "scale", "grad",
                                                      // a backward op's saved forward output: drawn
                                                      // as the forward's input, then passed through
                                                      // the forward along `dim` (values.cpp)
                                                      "saved_softmax", "saved_log_softmax",
                                                      // rms_norm's saved 1/sqrt(mean(x^2) + eps),
                                                      // one per row of x (values.cpp)
                                                      "saved_rstd",
                                                      // layer_norm's saved mean and
                                                      // 1/sqrt(var + eps), one per row of x
                                                      "saved_mean", "saved_ln_rstd",
                                                      // the upstream gradient of a scalar loss
                                                      // (values.cpp)
                                                      "loss_grad",
                                                      // flash_attention_backward's saved out and lse:
                                                      // an fp64 forward of the case's q, k, v
                                                      "saved_attention_out", "saved_attention_lse"};
      auto colon = spec.domain.find(':');
      if (colon != std::string::npos) {
        auto kind = spec.domain.substr(0, colon);
        if (kind != "indices" && kind != "lengths" && kind != "targets")
          return error(p, "unknown domain '" + spec.domain + "'");
        GPUEMU_TRY_STATUS(check_expr(spec.domain.substr(colon + 1), p));
      } else if (!k_domains.count(spec.domain)) {
        return error(p, "unknown domain '" + spec.domain + "'");
      }
      if (in.contains("optional")) {
        if (!in["optional"].is_boolean()) return error(p, "optional must be a bool");
        spec.optional = in["optional"].get<bool>();
      }
      if (in.contains("presence")) {
        const Json& pr = in["presence"];
        const std::string name = pr.is_string() ? pr.get<std::string>() : std::string();
        if (name == "drawn") spec.presence = InputPresence::drawn;
        else if (name == "when_pinned") spec.presence = InputPresence::when_pinned;
        else if (name == "unless_pinned_absent") spec.presence = InputPresence::unless_pinned_absent;
        else return error(p, "presence must be one of drawn, when_pinned, unless_pinned_absent");
        if (!spec.optional && spec.presence != InputPresence::drawn)
          return error(p, "presence '" + name + "' needs optional: true");
      }
      if (in.contains("layouts")) {
        static const std::set<std::string> k_layouts = {"transposed", "strided", "offset", "expanded"};
        if (!in["layouts"].is_array()) return error(p, "layouts must be a list");
        for (const auto& l : in["layouts"]) {
          if (!l.is_string() || !k_layouts.count(l.get<std::string>()))
            return error(p, "unknown layout " + l.dump());
          spec.layouts.push_back(l.get<std::string>());
        }
      }
      if (in.contains("values")) {
        static const std::set<std::string> k_recipes = {"logits", "norm", "accumulated", "wide", "regular"};
        if (!in["values"].is_string() || !k_recipes.count(in["values"].get<std::string>()))
          return error(p, "values must be one of logits, norm, accumulated, wide, regular");
        spec.values = in["values"].get<std::string>();
      }
      if (in.contains("any_leading_dims")) {
        if (!in["any_leading_dims"].is_boolean()) return error(p, "any_leading_dims must be a bool");
        spec.any_leading_dims = in["any_leading_dims"].get<bool>();
        if (spec.any_leading_dims && (spec.shape.empty() || !s.find_dim(spec.shape.front())))
          return error(p, "any_leading_dims needs a shape whose first entry is a dim name");
        if (spec.any_leading_dims && !spec.shape_when.empty())
          return error(p, "any_leading_dims and shape_when do not combine");
      }
      GPUEMU_TRY(spec.description, get_string(in, p, "description", false));
      s.inputs.push_back(std::move(spec));
    }
    return {};
  }

  Status check_attr_value(const AttrSpec& a, const Json& v, const std::vector<std::string>& p) const {
    if (v.is_null()) {
      if (!a.nullable) return error(p, "null is not allowed (the attr is not nullable)");
      return {};
    }
    bool ok = (a.type == "bool" && v.is_boolean()) || (a.type == "int" && v.is_number_integer()) ||
              (a.type == "float" && v.is_number()) || (a.type == "string" && v.is_string()) ||
              (a.type == "ints" && (v.is_number_integer() ||
                                    (v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& e) {
                                       return e.is_number_integer();
                                     }))));
    if (!ok) return error(p, "value " + v.dump() + " is not of type " + a.type);
    return {};
  }

  Status read_attrs(const Json& doc, OpSchema& s) const {
    if (!doc.contains("attrs")) return {};
    if (!doc["attrs"].is_object()) return error({"attrs"}, "must be an object");
    for (const auto& [name, a] : doc["attrs"].items()) {
      std::vector<std::string> p = {"attrs", name};
      GPUEMU_TRY_STATUS(check_keys(a, p, {"type", "nullable", "default", "values", "min", "max", "semantic", "dim_of", "description"}));
      AttrSpec spec;
      spec.name = name;
      GPUEMU_TRY(spec.type, get_string(a, p, "type", true));
      static const std::set<std::string> k_types = {"bool", "int", "float", "string", "ints"};
      if (!k_types.count(spec.type)) return error(p, "unknown attr type '" + spec.type + "'");
      spec.nullable = a.value("nullable", false);
      spec.semantic = a.value("semantic", true);
      spec.default_value = a.contains("default") ? a["default"] : Json(nullptr);
      GPUEMU_TRY_STATUS(check_attr_value(spec, spec.default_value, p));
      if (a.contains("values")) {
        if (!a["values"].is_array()) return error(p, "values must be a list");
        for (const auto& v : a["values"]) {
          GPUEMU_TRY_STATUS(check_attr_value(spec, v, p));
          spec.values.push_back(v);
        }
      }
      if (a.contains("min")) spec.min = a["min"].get<double>();
      if (a.contains("max")) spec.max = a["max"].get<double>();
      GPUEMU_TRY(spec.dim_of, get_string(a, p, "dim_of", false));
      if (!spec.dim_of.empty()) {
        const InputSpec* in = s.find_input(spec.dim_of);
        if (!in) return error(p, "dim_of names no input '" + spec.dim_of + "'");
        if (spec.type != "int") return error(p, "dim_of needs an int attr");
        const auto rank = static_cast<std::int64_t>(in->shape.size());
        for (const Json& v : spec.values)
          if (v.is_number_integer() && !dim_in_rank(v.get<std::int64_t>(), rank))
            return error(p, "value " + v.dump() + " is not a dim of the rank-" + std::to_string(rank) +
                                " input '" + spec.dim_of + "'");
      }
      GPUEMU_TRY(spec.description, get_string(a, p, "description", false));
      s.attrs.push_back(std::move(spec));
    }
    return {};
  }

  Status read_outputs(const Json& doc, OpSchema& s) const {
    if (!doc.contains("outputs") || !doc["outputs"].is_array() || doc["outputs"].empty())
      return error({"outputs"}, "must be a non-empty list");
    for (const auto& o : doc["outputs"]) {
      if (!o.is_object()) return error({"outputs"}, "entries must be objects");
      std::vector<std::string> p = {"outputs", o.value("name", std::string("?"))};
      GPUEMU_TRY_STATUS(check_keys(o, p, {"name", "shape", "dtype"}));
      OutputSpec spec;
      GPUEMU_TRY(spec.name, get_string(o, p, "name", true));
      if (!o.contains("shape")) return error(p, "missing required key 'shape'");
      spec.shape = o["shape"];
      GPUEMU_TRY(spec.dtype, get_string(o, p, "dtype", true));
      const auto& d = spec.dtype;
      bool ok = d == "case" || d.rfind("like:", 0) == 0 || d.rfind("attr:", 0) == 0 ||
                (parse_dtype(d) && dtype_name(*parse_dtype(d)) == d);
      if (!ok) return error(p, "dtype must be 'case', 'like:<input>', 'attr:<name>' or a dtype name");
      s.outputs.push_back(std::move(spec));
    }
    return {};
  }

  // Every name an expression reads is a dim or an attr; like:/attr: rules name real things.
  Status check_names(const OpSchema& s) const {
    auto known = [&](const std::string& n) { return s.find_dim(n) || s.find_attr(n); };
    auto check = [&](const std::string& text, const std::vector<std::string>& p) -> Status {
      auto e = Expr::parse(text);
      if (!e) return error(p, e.error().message);
      for (const auto& n : e->names())
        if (!known(n)) return error(p, "'" + n + "' in '" + text + "' is neither a dim nor an attr");
      return {};
    };
    for (const auto& d : s.dims)
      if (!d.expr.empty()) GPUEMU_TRY_STATUS(check(d.expr, {"dims", d.name}));
    for (const auto& in : s.inputs) {
      for (const auto* shape : in.all_shapes())
        for (const auto& e : *shape) GPUEMU_TRY_STATUS(check(e, {"inputs", in.name}));
      if (!in.shape_attr.empty()) {
        const std::vector<std::string> p = {"inputs", in.name, "shape_when"};
        const AttrSpec* a = s.find_attr(in.shape_attr);
        if (!a) return error(p, "'" + in.shape_attr + "' is not an attr");
        if (a->type != "string") return error(p, "'" + in.shape_attr + "' must be a string attr");
        for (const auto& [value, shape] : in.shape_when)
          if (!a->values.empty() && std::find(a->values.begin(), a->values.end(), Json(value)) == a->values.end())
            return error(p, "'" + value + "' is not a value of attr '" + in.shape_attr + "'");
      }
      auto colon = in.domain.find(':');
      if (colon != std::string::npos) GPUEMU_TRY_STATUS(check(in.domain.substr(colon + 1), {"inputs", in.name}));
    }
    for (const auto& c : s.constraints) GPUEMU_TRY_STATUS(check(c, {"constraints"}));
    if (!s.work.empty()) GPUEMU_TRY_STATUS(check(s.work, {"work"}));
    for (const auto& o : s.outputs) {
      if (o.dtype.rfind("like:", 0) == 0 && !s.find_input(o.dtype.substr(5)))
        return error({"outputs", o.name}, "dtype names no input '" + o.dtype.substr(5) + "'");
      if (o.dtype.rfind("attr:", 0) == 0 && !s.find_attr(o.dtype.substr(5)))
        return error({"outputs", o.name}, "dtype names no attr '" + o.dtype.substr(5) + "'");
    }
    std::set<std::string> seen;
    for (const auto& in : s.inputs)
      if (!seen.insert(in.name).second) return error({"inputs", in.name}, "duplicate input name");
    return {};
  }

  const std::string& m_text;
  const std::string& m_file;
};

}  // namespace

const DimDomain* OpSchema::find_dim(std::string_view n) const {
  for (const auto& d : dims)
    if (d.name == n) return &d;
  return nullptr;
}
const InputSpec* OpSchema::find_input(std::string_view n) const {
  for (const auto& i : inputs)
    if (i.name == n) return &i;
  return nullptr;
}
const std::vector<std::string>& InputSpec::shape_for(const AttrMap& attrs) const {
  if (shape_attr.empty() || !attrs.is_object()) return shape;
  auto a = attrs.find(shape_attr);
  if (a == attrs.end() || !a->is_string()) return shape;
  auto it = shape_when.find(a->get<std::string>());
  return it == shape_when.end() ? shape : it->second;
}

std::vector<const std::vector<std::string>*> InputSpec::all_shapes() const {
  std::vector<const std::vector<std::string>*> out = {&shape};
  for (const auto& [value, s] : shape_when) out.push_back(&s);
  return out;
}

const AttrSpec* OpSchema::find_attr(std::string_view n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

Result<AttrMap> OpSchema::resolve_attrs(const AttrMap& given) const {
  AttrMap out = Json::object();
  for (const auto& a : attrs) out[a.name] = a.default_value;
  if (given.is_null()) return out;
  if (!given.is_object()) return make_error(ErrorCode::invalid_argument, "attrs must be an object");
  for (const auto& [key, v] : given.items()) {
    const AttrSpec* a = find_attr(key);
    if (!a) {
      std::string known;
      for (const auto& x : attrs) known += (known.empty() ? "" : ", ") + x.name;
      return make_error(ErrorCode::invalid_argument, "op '" + name + "' has no attr '" + key +
                                                         "' (attrs: " + (known.empty() ? "none" : known) + ")");
    }
    bool ok = (v.is_null() && a->nullable) || (a->type == "bool" && v.is_boolean()) ||
              (a->type == "int" && v.is_number_integer()) || (a->type == "float" && v.is_number()) ||
              (a->type == "string" && v.is_string()) ||
              (a->type == "ints" && (v.is_number_integer() || v.is_array()));
    if (!ok)
      return make_error(ErrorCode::invalid_argument,
                        "attr '" + key + "' of op '" + name + "' must be " + a->type +
                            (a->nullable ? " or null" : "") + ", got " + v.dump());
    if (a->type == "string" && !a->values.empty() &&
        std::find(a->values.begin(), a->values.end(), v) == a->values.end()) {
      std::string allowed;
      for (const auto& x : a->values) allowed += (allowed.empty() ? "" : ", ") + x.dump();
      return make_error(ErrorCode::invalid_argument,
                        "attr '" + key + "' of op '" + name + "' must be one of " + allowed + ", got " + v.dump());
    }
    if (v.is_number() && ((a->min && v.get<double>() < *a->min) || (a->max && v.get<double>() > *a->max)))
      return make_error(ErrorCode::invalid_argument,
                        "attr '" + key + "' of op '" + name + "' is out of its range: " + v.dump());
    out[key] = v;
  }
  return out;
}

Status OpSchema::check_dim_attrs(const AttrMap& given,
                                 const std::function<std::int64_t(const InputSpec&)>& rank_of) const {
  for (const auto& a : attrs) {
    if (a.dim_of.empty() || !given.is_object() || !given.contains(a.name)) continue;
    const Json& v = given[a.name];
    const InputSpec* in = find_input(a.dim_of);
    if (!in || !v.is_number_integer()) continue;
    const std::int64_t rank = rank_of(*in), d = v.get<std::int64_t>();
    if (rank < 0 || dim_in_rank(d, rank)) continue;
    const std::int64_t r = std::max<std::int64_t>(rank, 1);
    return make_error(ErrorCode::invalid_argument,
                      "attr '" + a.name + "' of op '" + name + "' is " + std::to_string(d) +
                          ", not a dim of the rank-" + std::to_string(rank) + " input '" + in->name +
                          "' (it takes " + std::to_string(-r) + ".." + std::to_string(r - 1) + ")");
  }
  return {};
}

Result<OpSchema> parse_op_schema(const std::string& text, const std::string& file) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    auto byte = std::min<std::size_t>(e.byte, text.size());
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(byte ? byte - 1 : 0), '\n'));
    std::string msg = e.what();
    auto pos = msg.find("parse error");
    return make_error(ErrorCode::schema_error,
                      file + ":" + std::to_string(line) + ": invalid JSON (" +
                          (pos == std::string::npos ? msg : msg.substr(pos)) + ")");
  } catch (const Json::exception& e) {
    // Valid syntax the parser still refuses: a number past double's range (found by fuzz_schema:
    // it escaped as out_of_range and terminated the process).
    return make_error(ErrorCode::schema_error, file + ": invalid JSON (" + e.what() + ")");
  }
  SchemaReader reader(text, file);
  Result<OpSchema> s = make_error(ErrorCode::schema_error, file + ": unreadable schema");
  try {
    s = reader.read(doc);
  } catch (const Json::exception& e) {
    // A value of the wrong JSON type where the reader asks for one (fuzz_schema: a string among
    // the inputs made value() throw type_error and terminated the process).
    return make_error(ErrorCode::schema_error, file + ": a value of the wrong type (" + e.what() + ")");
  }
  if (s) s->source_file = file;
  return s;
}

Result<OpSchema> load_op_schema_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_op_schema(ss.str(), path);
}

}  // namespace gpuemu
