// Reading gpuemu.toml (see project_config.hpp and docs/ci.md).
#include <gpuemu/project/project_config.hpp>

#include <gpuemu/project/project_keys.hpp>

#include <toml++/toml.h>
#include <gpuemu/lint/policy.hpp>
#include <gpuemu/engine/op_schema.hpp>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <sstream>

namespace gpuemu::project {
namespace fs = std::filesystem;

namespace {

// Reads typed values out of toml nodes; every error names the file and the line.
class Reader {
 public:
  explicit Reader(std::string source) : m_source(std::move(source)) {}

  Error at(const toml::source_region& where, const std::string& what) const {
    return make_error(ErrorCode::invalid_argument,
                      m_source + ":" + std::to_string(where.begin.line) + ": " + what);
  }
  Error at(const toml::node& node, const std::string& what) const {
    return at(node.source(), what);
  }

  // Every key of `table` must be one of the keys project_keys.cpp lists for `table_name`.
  Status check_keys(const toml::table& table, const std::string& where,
                    std::string_view table_name) const {
    std::vector<std::string_view> known;
    if (const ProjectTable* t = find_project_table(table_name))
      for (const auto& k : t->keys) known.push_back(k.name);
    for (auto&& [key, value] : table) {
      if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
      if (key.str() == "tolerance")
        return at(key.source(), "'tolerance' in " + where +
                                    " is not a key: override the envelope with envelope = 6.0 or "
                                    "envelope = { float16 = 8.0 } (docs/ci.md)");
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return at(key.source(), "unknown key '" + std::string(key.str()) + "' in " + where +
                                  " (known: " + list + ")");
    }
    return {};
  }

  Result<std::string> string(const toml::node& n, const std::string& key) const {
    if (auto v = n.value<std::string>(); v && n.is_string()) return *v;
    return at(n, "'" + key + "' must be a string");
  }
  Result<std::int64_t> positive_int(const toml::node& n, const std::string& key) const {
    // is_integer() first: toml++'s value<int64_t>() of a float converts it, undefined past
    // int64's range (fuzz_toml: `seed = 1.2e49`).
    if (n.is_integer())
      if (auto v = n.value<std::int64_t>(); v && *v >= 1) return *v;
    return at(n, "'" + key + "' must be a positive integer");
  }
  Result<double> positive_number(const toml::node& n, const std::string& key) const {
    if (auto v = n.value<double>(); v && (n.is_floating_point() || n.is_integer()) && *v > 0)
      return *v;
    return at(n, "'" + key + "' must be a positive number");
  }
  Result<bool> boolean(const toml::node& n, const std::string& key) const {
    if (auto v = n.value<bool>(); v && n.is_boolean()) return *v;
    return at(n, "'" + key + "' must be true or false");
  }
  Result<std::uint64_t> seed(const toml::node& n) const {
    if (n.is_integer())
      if (auto v = n.value<std::int64_t>(); v && *v >= 0) return static_cast<std::uint64_t>(*v);
    return at(n, "'seed' must be a non-negative integer");
  }
  Result<std::vector<std::string>> strings(const toml::node& n, const std::string& key) const {
    const toml::array* a = n.as_array();
    if (a == nullptr) return at(n, "'" + key + "' must be an array of strings");
    std::vector<std::string> out;
    for (const toml::node& item : *a) {
      GPUEMU_TRY(auto s, string(item, key + "[]"));
      out.push_back(s);
    }
    return out;
  }
  Result<std::string> one_of(const toml::node& n, const std::string& key,
                             std::initializer_list<std::string_view> allowed) const {
    GPUEMU_TRY(std::string s, string(n, key));
    if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return s;
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    return at(n, "'" + key + "' must be one of " + list + ", got '" + s + "'");
  }

  // A TOML value as JSON (attrs).
  Result<nlohmann::json> json(const toml::node& n) const {
    if (n.is_boolean()) return nlohmann::json(*n.value<bool>());
    if (n.is_integer()) return nlohmann::json(*n.value<std::int64_t>());
    if (n.is_floating_point()) return nlohmann::json(*n.value<double>());
    if (n.is_string()) return nlohmann::json(*n.value<std::string>());
    if (const toml::array* a = n.as_array()) {
      nlohmann::json out = nlohmann::json::array();
      for (const toml::node& item : *a) {
        GPUEMU_TRY(auto v, json(item));
        out.push_back(v);
      }
      return out;
    }
    return at(n, "attr values must be booleans, numbers, strings or arrays of them");
  }

 private:
  std::string m_source;
};

struct Defaults {
  std::int64_t iterations = 100;
  std::string strategy = "adversarial";
  std::vector<std::string> dtypes;
  std::optional<std::uint64_t> seed;
  std::string framework = "numpy";
  double timeout_s = 60.0;
};

Status read_defaults(const Reader& r, const toml::table& t, Defaults& d) {
  GPUEMU_TRY_STATUS(r.check_keys(t, "[defaults]", "defaults"));
  for (auto&& [key, n] : t) {
    const std::string k(key.str());
    if (k == "iterations") {
      GPUEMU_TRY(d.iterations, r.positive_int(n, k));
    } else if (k == "strategy") {
      GPUEMU_TRY(d.strategy, r.one_of(n, k, {"regular", "boundary", "adversarial", "special"}));
    } else if (k == "dtypes") {
      GPUEMU_TRY(d.dtypes, r.strings(n, k));
    } else if (k == "seed") {
      GPUEMU_TRY(d.seed, r.seed(n));
    } else if (k == "framework") {
      GPUEMU_TRY(d.framework, r.one_of(n, k, {"numpy", "torch"}));
    } else if (k == "timeout_s") {
      GPUEMU_TRY(d.timeout_s, r.positive_number(n, k));
    }
  }
  return {};
}

Result<ProjectOp> read_op(const Reader& r, const toml::table& t, const Defaults& d,
                          const fs::path& base_dir) {
  GPUEMU_TRY_STATUS(
      r.check_keys(t, "[[op]]", "op"));
  ProjectOp op;
  op.line = static_cast<int>(t.source().begin.line);
  op.framework = d.framework;
  op.timeout_s = d.timeout_s;
  op.dtypes = d.dtypes;
  op.iterations = d.iterations;
  op.strategy = d.strategy;
  op.seed = d.seed;
  std::string own_precision;  // precision = "tf32": the policy of this entry's op
  for (auto&& [key, n] : t) {
    const std::string k(key.str());
    if (k == "name") {
      GPUEMU_TRY(op.op, r.string(n, k));
    } else if (k == "script") {
      GPUEMU_TRY(std::string s, r.string(n, k));
      const auto colon = s.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
        return r.at(n, "'script' must be \"FILE.py:FUNC\", got '" + s + "'");
      fs::path p = s.substr(0, colon);
      if (p.is_relative()) p = base_dir / p;
      op.script = p.lexically_normal().string();
      op.function = s.substr(colon + 1);
      if (!fs::is_regular_file(op.script)) return r.at(n, "'script': no file " + op.script);
    } else if (k == "kernel") {
      GPUEMU_TRY(op.builtin, r.string(n, k));
    } else if (k == "framework") {
      GPUEMU_TRY(op.framework, r.one_of(n, k, {"numpy", "torch"}));
    } else if (k == "python") {
      GPUEMU_TRY(op.python, r.string(n, k));
    } else if (k == "timeout_s") {
      GPUEMU_TRY(op.timeout_s, r.positive_number(n, k));
    } else if (k == "dtypes") {
      GPUEMU_TRY(op.dtypes, r.strings(n, k));
      for (const auto& dt : op.dtypes)
        if (!parse_dtype(dt)) return r.at(n, "unknown dtype '" + dt + "'");
    } else if (k == "iterations") {
      GPUEMU_TRY(op.iterations, r.positive_int(n, k));
    } else if (k == "strategy") {
      GPUEMU_TRY(op.strategy, r.one_of(n, k, {"regular", "boundary", "adversarial", "special"}));
    } else if (k == "seed") {
      GPUEMU_TRY(op.seed, r.seed(n));
    } else if (k == "dims") {
      const toml::table* dims = n.as_table();
      if (dims == nullptr) return r.at(n, "'dims' must be a table: dims = { N = [64, 129] }");
      for (auto&& [dim, sizes] : *dims) {
        const toml::array* a = sizes.as_array();
        if (a == nullptr || a->empty())
          return r.at(sizes, "dims." + std::string(dim.str()) + " must be a non-empty array");
        std::vector<std::int64_t> v;
        for (const toml::node& s : *a) {
          const auto x = s.is_integer() ? s.value<std::int64_t>() : std::nullopt;
          if (!x || *x < 0)
            return r.at(s, "dims." + std::string(dim.str()) + " sizes must be integers >= 0");
          v.push_back(*x);
        }
        op.dims[std::string(dim.str())] = v;
      }
    } else if (k == "attrs") {
      const toml::table* attrs = n.as_table();
      if (attrs == nullptr) return r.at(n, "'attrs' must be a table: attrs = { dim = -1 }");
      for (auto&& [name, value] : *attrs) {
        GPUEMU_TRY(op.attrs[std::string(name.str())], r.json(value));
      }
    } else if (k == "vary_attrs") {
      GPUEMU_TRY(op.vary_attrs, r.strings(n, k));
    } else if (k == "layouts") {
      GPUEMU_TRY(op.layouts, r.boolean(n, k));
    } else if (k == "with" || k == "without") {
      GPUEMU_TRY(auto names, r.strings(n, k));
      for (const auto& name : names) {
        auto [it, fresh] = op.present.emplace(name, k == "with");
        if (!fresh && it->second != (k == "with"))
          return r.at(n, "input '" + name + "' is in both 'with' and 'without'");
      }
    } else if (k == "precision") {
      if (const toml::table* per = n.as_table()) {
        for (auto&& [key2, v] : *per) {
          GPUEMU_TRY(op.precision[std::string(key2.str())], r.string(v, "precision." + std::string(key2.str())));
        }
      } else {
        GPUEMU_TRY(own_precision, r.string(n, k));  // the entry's op, keyed once its name is known
      }
    } else if (k == "envelope") {
      if (const toml::table* per = n.as_table()) {
        for (auto&& [dt, v] : *per) {
          if (!parse_dtype(std::string(dt.str())))
            return r.at(v, "envelope: unknown dtype '" + std::string(dt.str()) + "'");
          GPUEMU_TRY(op.envelope[std::string(dt.str())],
                     r.positive_number(v, "envelope." + std::string(dt.str())));
        }
      } else {
        GPUEMU_TRY(op.envelope["*"], r.positive_number(n, k));
      }
    }
  }
  if (op.op.empty()) return r.at(t.source(), "[[op]] needs 'name' (a catalogue op)");
  if (!own_precision.empty()) op.precision[op.op] = own_precision;
  for (const auto& [key2, policy] : op.precision)
    if (!parse_precision(policy))
      return r.at(t.source(), "[[op]] '" + op.op + "': precision '" + key2 + "': unknown policy '" + policy +
                                  "' (ieee, tf32, tf32x3, bf16x3)");
  if (op.script.empty() == op.builtin.empty())
    return r.at(t.source(), "[[op]] '" + op.op + "' needs exactly one of 'script' or 'kernel'");
  for (const auto& dt : op.dtypes)
    if (!parse_dtype(dt)) return r.at(t.source(), "unknown dtype '" + dt + "'");
  return op;
}

// "FILE.py:FUNC" relative to `base_dir`: the absolute file (which must exist) and FUNC.
Result<std::pair<std::string, std::string>> script_ref(const Reader& r, const toml::node& n,
                                                       const std::string& key,
                                                       const fs::path& base_dir) {
  GPUEMU_TRY(std::string s, r.string(n, key));
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    return r.at(n, "'" + key + "' must be \"FILE.py:FUNC\", got '" + s + "'");
  fs::path p = s.substr(0, colon);
  if (p.is_relative()) p = base_dir / p;
  p = p.lexically_normal();
  if (!fs::is_regular_file(p)) return r.at(n, "'" + key + "': no file " + p.string());
  return std::make_pair(p.string(), s.substr(colon + 1));
}

Result<CustomOp> read_custom_op(const Reader& r, const std::string& name, const toml::table& t,
                                const Defaults& d, const fs::path& base_dir) {
  const std::string where = "[custom_ops." + name + "]";
  GPUEMU_TRY_STATUS(
      r.check_keys(t, where, "custom_ops.*"));
  CustomOp op;
  op.name = name;
  op.line = static_cast<int>(t.source().begin.line);
  op.timeout_s = d.timeout_s;
  const toml::node* schema = t.get("schema");
  if (const toml::node* torch = t.get("torch_op")) {
    for (const char* other : {"schema", "reference"})
      if (t.get(other))
        return r.at(*t.get(other), where + ": '" + std::string(other) +
                                       "' and 'torch_op' exclude each other (a torch op infers its "
                                       "schema and is its own reference)");
    GPUEMU_TRY(auto sf, script_ref(r, *torch, "torch_op", base_dir));
    op.torch_op_script = sf.first;
    op.torch_op_name = sf.second;
    for (auto&& [key, n] : t) {
      const std::string k(key.str());
      if (k == "control") {
        GPUEMU_TRY(auto cf, script_ref(r, n, k, base_dir));
        op.control_script = cf.first;
        op.control_function = cf.second;
      } else if (k == "python") {
        GPUEMU_TRY(op.python, r.string(n, k));
      } else if (k == "timeout_s") {
        GPUEMU_TRY(op.timeout_s, r.positive_number(n, k));
      }
    }
    return op;
  }
  if (schema == nullptr)
    return r.at(t.source(), where + " needs 'schema' (the op's JSON schema) or 'torch_op' "
                                    "(a gpuemu.torch_op, FILE.py:NAME)");
  GPUEMU_TRY(std::string file, r.string(*schema, "schema"));
  fs::path p = file;
  if (p.is_relative()) p = base_dir / p;
  op.schema_file = p.lexically_normal().string();
  std::ifstream in(op.schema_file);
  if (!in) return r.at(*schema, "'schema': cannot read " + op.schema_file);
  std::ostringstream text;
  text << in.rdbuf();
  op.schema_text = text.str();
  // The same checks the daemon makes (schemas/op.schema.json, docs/schemas.md), with its lines.
  auto parsed = parse_op_schema(op.schema_text, op.schema_file);
  if (!parsed) return r.at(*schema, parsed.error().message);
  if (parsed->name != name)
    return r.at(*schema, op.schema_file + " defines op '" + parsed->name + "', not '" + name + "'");
  for (DType dt : parsed->dtypes) op.dtypes.emplace_back(dtype_name(dt));
  for (auto&& [key, n] : t) {
    const std::string k(key.str());
    if (k == "reference") {
      GPUEMU_TRY(auto sf, script_ref(r, n, k, base_dir));
      op.reference_script = sf.first;
      op.reference_function = sf.second;
    } else if (k == "control") {
      GPUEMU_TRY(auto sf, script_ref(r, n, k, base_dir));
      op.control_script = sf.first;
      op.control_function = sf.second;
    } else if (k == "python") {
      GPUEMU_TRY(op.python, r.string(n, k));
    } else if (k == "timeout_s") {
      GPUEMU_TRY(op.timeout_s, r.positive_number(n, k));
    }
  }
  if (op.reference_script.empty() && parsed->reference.rfind("script:", 0) != 0 &&
      parsed->reference.rfind("builtin:", 0) != 0)
    return r.at(t.source(), where + " needs 'reference' = \"FILE.py:FUNC\"");
  return op;
}

Status read_ci(const Reader& r, const toml::table& t, ProjectConfig& c) {
  GPUEMU_TRY_STATUS(r.check_keys(t, "[ci]", "ci"));
  const fs::path base_dir = c.file.parent_path();
  for (auto&& [key, n] : t) {
    const std::string k(key.str());
    if (k == "lint_paths") {
      GPUEMU_TRY(auto paths, r.strings(n, k));
      for (const auto& p : paths) {
        fs::path full = p;
        if (full.is_relative()) full = base_dir / full;
        full = full.lexically_normal();
        if (!fs::exists(full)) return r.at(n, "'lint_paths': no file or directory " + full.string());
        c.lint_paths.push_back(full.string());
      }
    } else if (k == "lint_baseline") {
      GPUEMU_TRY(std::string p, r.string(n, k));
      fs::path full = p;
      if (full.is_relative()) full = base_dir / full;
      c.lint_baseline = full.lexically_normal().string();
    } else if (k == "lint_baseline_tag") {
      GPUEMU_TRY(c.lint_baseline_tag, r.string(n, k));
    } else if (k == "preset") {
      GPUEMU_TRY(c.ci_preset, r.string(n, k));
    } else if (k == "minimize") {
      GPUEMU_TRY(c.ci_minimize, r.boolean(n, k));
    } else if (k == "presets") {
      const toml::table* presets = n.as_table();
      if (presets == nullptr) return r.at(n, "[ci.presets] must be a table of tables");
      for (auto&& [name, body] : *presets) {
        const toml::table* p = body.as_table();
        const std::string where = "[ci.presets." + std::string(name.str()) + "]";
        if (p == nullptr) return r.at(body, where + " must be a table");
        GPUEMU_TRY_STATUS(r.check_keys(*p, where, "ci.presets.*"));
        CiPreset preset = c.presets.count(std::string(name.str()))
                              ? c.presets[std::string(name.str())]
                              : CiPreset{};
        if (const toml::node* s = p->get("scale")) {
          GPUEMU_TRY(preset.scale, r.positive_number(*s, "scale"));
        }
        if (const toml::node* m = p->get("min_iterations")) {
          GPUEMU_TRY(preset.min_iterations, r.positive_int(*m, "min_iterations"));
        }
        c.presets[std::string(name.str())] = preset;
      }
    }
  }
  return {};
}

}  // namespace

// What an [[op]] asks of its custom op's dtypes that the op does not allow ("" when nothing).
std::string dtypes_not_allowed(const ProjectOp& op, const CustomOp& custom) {
  const auto allowed = [&](const std::string& dt) {
    return std::find(custom.dtypes.begin(), custom.dtypes.end(), dt) != custom.dtypes.end();
  };
  for (const auto& dt : op.dtypes)
    if (!allowed(dt)) return "custom op '" + op.op + "' does not allow dtype '" + dt + "'";
  for (const auto& [dt, v] : op.envelope)
    if (dt != "*" && !allowed(dt))
      return "envelope: custom op '" + op.op + "' does not allow dtype '" + dt + "'";
  return "";
}

nlohmann::json CustomOp::spec() const {
  nlohmann::json j = {{"name", name}, {"schema", schema_text}, {"schema_file", schema_file}};
  if (is_torch_op()) {
    j["reference"] = {{"script", torch_op_script},
                      {"function", torch_op_name},
                      {"timeout_s", timeout_s},
                      {"torch_op", true}};
    if (!python.empty()) j["reference"]["python"] = python;
    j["envelope"] = torch_op_envelope;
  } else if (!reference_script.empty()) {
    j["reference"] = {{"script", reference_script},
                      {"function", reference_function},
                      {"timeout_s", timeout_s}};
    if (!python.empty()) j["reference"]["python"] = python;
  }
  return j;
}

nlohmann::json CustomOp::control_spec() const {
  if (control_script.empty()) return nullptr;
  nlohmann::json k = {{"kind", "script"},
                      {"script", control_script},
                      {"function", control_function},
                      {"framework", is_torch_op() ? "torch" : "numpy"},
                      {"timeout_s", timeout_s},     {"name", control_function},
                      {"file", control_script}};
  if (!python.empty()) k["python"] = python;
  return k;
}

nlohmann::json ProjectOp::kernel_spec() const {
  if (!builtin.empty()) return {{"kind", "builtin"}, {"name", builtin}};
  nlohmann::json k = {{"kind", "script"},       {"script", script},       {"function", function},
                      {"framework", framework}, {"timeout_s", timeout_s}, {"name", function},
                      {"file", script}};
  if (!python.empty()) k["python"] = python;
  return k;
}

std::string ProjectOp::kernel_label() const {
  if (!builtin.empty()) return "builtin:" + builtin;
  return fs::path(script).filename().string() + ":" + function;
}

std::string ProjectOp::repro_prefix(const std::vector<std::string>& run_dtypes) const {
  std::string p = "gpuemu fuzz " + op;
  if (!builtin.empty())
    p += " --kernel " + builtin;
  else
    p += " --script " + script + ":" + function +
         (framework != "numpy" ? " --framework " + framework : "");
  if (strategy != "adversarial") p += " --strategy " + strategy;
  for (const auto& dtype : run_dtypes) p += " --dtype " + dtype;
  for (const auto& [name, sizes] : dims) {
    std::string list;
    for (auto s : sizes) list += (list.empty() ? "" : ",") + std::to_string(s);
    p += " --dims " + name + "=" + list;
  }
  for (const auto& [name, value] : attrs.items()) p += " --attr " + name + "=" + value.dump();
  for (const auto& v : vary_attrs) p += " --vary-attr " + v;
  if (!layouts) p += " --no-layouts";
  for (const auto& [name, on] : present) p += (on ? " --with " : " --without ") + name;
  for (const auto& [key, policy] : precision) p += " --precision " + key + "=" + policy;
  return p;
}

FuzzOptions ProjectOp::fuzz_options(const std::string& dtype) const {
  FuzzOptions o;
  if (!dtype.empty()) {
    if (auto dt = parse_dtype(dtype)) o.dtypes.push_back(*dt);
  } else {
    for (const auto& d : dtypes)
      if (auto dt = parse_dtype(d)) o.dtypes.push_back(*dt);
  }
  if (auto dist = parse_distribution(strategy)) o.distribution = *dist;
  for (const auto& [k, v] : dims) o.dims[k] = v;
  o.attrs = attrs;
  o.vary_attrs = vary_attrs;
  o.layouts = layouts;
  for (const auto& [k, v] : present) o.present[k] = v;
  for (const auto& [k, v] : precision) o.precision[k] = v;
  return o;
}

Result<ProjectConfig> parse_project_config(const std::string& text, const fs::path& file) {
  const std::string source = file.string();
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument, source + ":" +
                                                       std::to_string(e.source().begin.line) + ":" +
                                                       std::to_string(e.source().begin.column) +
                                                       ": " + std::string(e.description()));
  }
  Reader r(source);
  ProjectConfig c;
  c.file = file;
  c.text = text;
  c.presets["default"] = {1.0, 1};
  c.presets["quick"] = {0.25, 10};
  c.presets["thorough"] = {4.0, 1};
  GPUEMU_TRY_STATUS(r.check_keys(root, "gpuemu.toml", ""));
  Defaults d;
  if (const toml::node* n = root.get("project")) {
    const toml::table* t = n->as_table();
    if (t == nullptr) return r.at(*n, "[project] must be a table");
    GPUEMU_TRY_STATUS(r.check_keys(*t, "[project]", "project"));
    if (const toml::node* name = t->get("name")) {
      GPUEMU_TRY(c.name, r.string(*name, "name"));
    }
  }
  if (const toml::node* n = root.get("defaults")) {
    const toml::table* t = n->as_table();
    if (t == nullptr) return r.at(*n, "[defaults] must be a table");
    GPUEMU_TRY_STATUS(read_defaults(r, *t, d));
  }
  if (const toml::node* n = root.get("ci")) {
    const toml::table* t = n->as_table();
    if (t == nullptr) return r.at(*n, "[ci] must be a table");
    GPUEMU_TRY_STATUS(read_ci(r, *t, c));
  }
  if (!c.presets.count(c.ci_preset))
    return make_error(ErrorCode::invalid_argument,
                      source + ": [ci].preset '" + c.ci_preset + "' is not a known preset");
  if (const toml::node* n = root.get("custom_ops")) {
    const toml::table* t = n->as_table();
    if (t == nullptr) return r.at(*n, "'custom_ops' must be a table: write [custom_ops.NAME]");
    for (auto&& [name, body] : *t) {
      const toml::table* ct = body.as_table();
      if (ct == nullptr) return r.at(body, "[custom_ops." + std::string(name.str()) + "] must be a table");
      GPUEMU_TRY(CustomOp op, read_custom_op(r, std::string(name.str()), *ct, d, file.parent_path()));
      c.custom_ops.emplace(op.name, std::move(op));
    }
  }
  if (const toml::node* n = root.get("lint")) {
    c.has_lint = true;
    c.lint_line = static_cast<int>(n->source().begin.line);
  }
  if (const toml::node* n = root.get("op")) {
    const toml::array* ops = n->as_array();
    if (ops == nullptr) return r.at(*n, "'op' must be an array of tables: write [[op]]");
    for (const toml::node& item : *ops) {
      const toml::table* t = item.as_table();
      if (t == nullptr) return r.at(item, "each [[op]] must be a table");
      GPUEMU_TRY(ProjectOp op, read_op(r, *t, d, file.parent_path()));
      if (const CustomOp* custom = c.custom_op(op.op); custom && !custom->is_torch_op()) {
        if (const std::string bad = dtypes_not_allowed(op, *custom); !bad.empty()) return r.at(*t, bad);
      }
      c.ops.push_back(std::move(op));
    }
  }
  // [lint] is validated by the lint policy reader itself (the same messages as `gpuemu lint`).
  GPUEMU_TRY_STATUS(lint::parse_policy(text, source));
  return c;
}

std::string example_project_config() {
  return R"(# gpuemu.toml: the ops of this project that `gpuemu ci` fuzzes (docs/ci.md lists every key).
# Unknown keys are errors, so a misspelt setting never silently does nothing.

[project]
name = "my-kernels"

# Defaults for every [[op]] below; each [[op]] may override them.
[defaults]
iterations = 100            # cases per op and dtype
strategy = "adversarial"    # regular | boundary | adversarial | special
# dtypes = ["float32", "bfloat16"]   # default: every dtype the op allows
# seed = 1234               # default: a fresh random seed per run (printed, and in the reports)
framework = "numpy"         # what script kernels receive: numpy | torch
timeout_s = 60.0            # seconds a script kernel may take per case

# One [[op]] per kernel under test. `name` is a catalogue op (gpuemu ops list); the kernel is a
# Python function (script = "FILE.py:FUNC", relative to this file) or a built-in emulated kernel.
[[op]]
name = "softmax"
kernel = "fp32_online"      # replace with: script = "kernels/softmax.py:softmax"
dtypes = ["float32"]
iterations = 40
# envelope = 6.0                   # override the envelope (or { float16 = 8.0 }); default: calibrated
# dims = { N = [64, 129, 4097] }   # restrict a dim to these sizes
# attrs = { dim = -1 }             # pin an attr
# vary_attrs = ["dim"]             # vary an attr over its domain
# layouts = true                   # also feed non-contiguous inputs

# A custom op: your own schema and a float64 reference in Python (docs/custom-ops.md); fuzz a
# kernel against it with an [[op]] naming it.
# [custom_ops.my_op]
# schema = "ops/my_op.json"                  # schemas/op.schema.json format
# reference = "ref/my_op.py:reference"       # computes in float64
# control = "ref/my_op.py:control"           # a correct kernel: gpuemu calibrate my_op

# [lint]                    # the policy of `gpuemu lint` (docs/lint.md); gpuemu ci runs it
# max_registers = 128
# allow_spills = false

[ci]
preset = "default"          # default | quick | thorough | one of [ci.presets.*]
minimize = false            # minimise the first failure of each op (slower)
# lint_paths = ["build/kernels"]   # gpuemu ci also runs gpuemu lint on these with [lint]
# [ci.presets.nightly]
# scale = 10.0              # iterations x scale
# min_iterations = 50
)";
}

}  // namespace gpuemu::project
