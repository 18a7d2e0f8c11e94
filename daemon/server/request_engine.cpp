// RequestEngine (request_engine.hpp): custom ops and envelope overrides of one request.
#include "request_engine.hpp"

#include "gpuemu/script/script_reference.hpp"
#include "supplied_reference.hpp"

#include <filesystem>

namespace gpuemu::server {
namespace {

namespace fs = std::filesystem;

// "FILE.py:FUNC" -> (FILE made absolute against `base`, FUNC).
Result<std::pair<std::string, std::string>> split_script(const std::string& text,
                                                         const fs::path& base) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return make_error(ErrorCode::invalid_argument,
                      "a reference must be \"FILE.py:FUNC\", got '" + text + "'");
  fs::path file = text.substr(0, colon);
  if (file.is_relative()) file = base / file;
  return std::make_pair(file.lexically_normal().string(), text.substr(colon + 1));
}

// The interpreter and limits a custom op's reference runs under: the request's, else the daemon's.
script::ScriptKernelSpec reference_process(const DaemonContext& ctx, const Json& ref) {
  script::ScriptKernelSpec rs;
  rs.python = ref.is_object() ? ref.value("python", ctx.config.python) : ctx.config.python;
  rs.timeout_s =
      ref.is_object() ? ref.value("timeout_s", ctx.config.script_timeout_s) : ctx.config.script_timeout_s;
  rs.memory_limit_mb = ctx.config.script_memory_mb;
  return rs;
}

// Parses and binds a custom op: its schema (the file's text, so errors carry its line numbers,
// or the document) and its reference (the spec's, else the schema's `script:` one).
Result<OpSchema> load_custom_op(const DaemonContext& ctx, const Json& spec) {
  if (!spec.is_object())
    return make_error(ErrorCode::invalid_argument, "'custom_op' must be an object");
  const std::string file = spec.value("schema_file", std::string("custom_op.schema"));
  auto doc = spec.find("schema");
  if (doc == spec.end() || !(doc->is_string() || doc->is_object()))
    return make_error(ErrorCode::invalid_argument,
                      "'custom_op' needs 'schema': the schema file's text (or its JSON document)");
  GPUEMU_TRY(OpSchema schema,
             parse_op_schema(doc->is_string() ? doc->get<std::string>() : doc->dump(2), file));
  if (spec.contains("name") && spec["name"] != schema.name)
    return make_error(ErrorCode::invalid_argument,
                      file + ": the schema's name is '" + schema.name + "', the project calls it '" +
                          spec["name"].get<std::string>() + "'");
  schema.source_file = file;
  const fs::path base = fs::path(file).parent_path();
  const Json ref = spec.value("reference", Json());
  if (schema.reference.rfind("torch:", 0) == 0) {
    if (ref.is_object() && ref.value("torch_op", false)) {
      // A torch op named in gpuemu.toml (FILE.py:NAME): the daemon runs its reference in a
      // script process (script_reference.hpp), so repro and minimize work from any client.
      script::ScriptKernelSpec rs = reference_process(ctx, ref);
      GPUEMU_TRY(rs.script, string_param(ref, "script"));
      GPUEMU_TRY(rs.function, string_param(ref, "function"));
      GPUEMU_TRY_STATUS(remote_script_allowed(ctx.config, "the torch op '" + schema.name + "'"));
      if (!fs::path(rs.script).is_absolute()) rs.script = (base / rs.script).lexically_normal().string();
      GPUEMU_TRY(schema.external_reference,
                 script::make_torch_op_reference(
                     rs, doc->is_string() ? doc->get<std::string>() : doc->dump(1)));
      return schema;
    }
    // PyTorch code held by the client that made the op: it supplies each case's reference with
    // the kernel's outputs (supplied_reference.hpp).
    schema.external_reference = std::make_shared<SuppliedReference>();
    return schema;
  }
  script::ScriptKernelSpec rs = reference_process(ctx, ref);
  if (ref.is_object()) {
    GPUEMU_TRY(rs.script, string_param(ref, "script"));
    GPUEMU_TRY(rs.function, string_param(ref, "function"));
  } else if (!ref.is_null()) {
    return make_error(ErrorCode::invalid_argument,
                      "'custom_op.reference' must be {script, function, python?, timeout_s?}");
  } else if (schema.reference.rfind("script:", 0) == 0) {
    GPUEMU_TRY(auto sf, split_script(schema.reference.substr(7), base));
    rs.script = sf.first;
    rs.function = sf.second;
  } else {
    return schema;  // builtin:<name>: run_reference finds it (or says there is none)
  }
  GPUEMU_TRY_STATUS(remote_script_allowed(ctx.config, "the custom op '" + schema.name + "' reference"));
  if (!fs::path(rs.script).is_absolute()) rs.script = (base / rs.script).lexically_normal().string();
  schema.reference = "script:" + rs.script + ":" + rs.function;
  GPUEMU_TRY(schema.external_reference, script::make_script_reference(rs));
  return schema;
}

}  // namespace

Result<std::map<std::string, double>> parse_envelope_override(const Json& v) {
  std::map<std::string, double> out;
  if (v.is_null()) return out;
  auto positive = [](const Json& x) { return x.is_number() && x.get<double>() > 0; };
  if (positive(v)) {
    out["*"] = v.get<double>();
    return out;
  }
  if (!v.is_object())
    return make_error(ErrorCode::invalid_argument,
                      "'envelope' must be a positive number or an object {dtype: number}");
  for (const auto& [dt, x] : v.items()) {
    if (dt != "*" && !parse_dtype(dt))
      return make_error(ErrorCode::invalid_argument, "'envelope': unknown dtype '" + dt + "'");
    if (!positive(x))
      return make_error(ErrorCode::invalid_argument,
                        "'envelope." + dt + "' must be a positive number");
    out[dt] = x.get<double>();
  }
  return out;
}

Result<RequestEngine> RequestEngine::make(DaemonContext& ctx, const Json& params) {
  return make(ctx, params.value("op", ""), params.value("custom_op", Json()),
              params.value("envelope", Json()));
}

Result<RequestEngine> RequestEngine::make(DaemonContext& ctx, const std::string& op,
                                          const Json& custom, const Json& envelope) {
  RequestEngine re(ctx);
  // A custom op may carry its own envelope (a torch op's 2: no term of its bound is calibrated),
  // applied as an override unless the request sets one.
  const bool own = envelope.is_null() && custom.is_object() && custom.contains("envelope");
  GPUEMU_TRY(re.m_override, parse_envelope_override(own ? custom["envelope"] : envelope));
  if (custom.is_null() && re.m_override.empty()) {
    re.m_lock = std::shared_lock(ctx.engine_mutex);
    return re;
  }
  std::shared_ptr<const Catalogue> catalogue;
  if (!custom.is_null()) {
    GPUEMU_TRY(OpSchema schema, load_custom_op(ctx, custom));
    re.m_override_op = schema.name;
    Json stored = custom;
    stored["name"] = schema.name;
    stored["schema_version"] = schema.version;
    re.m_custom = std::move(stored);
    GPUEMU_TRY(catalogue, ctx.engine.catalogue().with_op(std::move(schema)));
  }
  if (re.m_override_op.empty()) re.m_override_op = op;
  if (!re.m_override.empty() && re.m_override_op.empty())
    return make_error(ErrorCode::invalid_argument, "'envelope' needs the request's 'op'");
  {
    std::shared_lock lock(ctx.engine_mutex);
    EnvelopeTable table = ctx.engine.envelopes();
    if (!catalogue) {
      // The daemon's own catalogue, shared: a copy of the engine copies the pointer.
      re.m_copy.emplace(ctx.engine);
    } else {
      re.m_copy.emplace(catalogue, std::move(table));
    }
  }
  re.m_catalogue = catalogue;
  if (!re.m_override.empty()) {
    GPUEMU_TRY(const OpSchema* s, re.m_copy->catalogue().get(re.m_override_op));
    for (DType d : s->dtypes) {
      const std::string name(dtype_name(d));
      auto it = re.m_override.count(name) ? re.m_override.find(name) : re.m_override.find("*");
      if (it != re.m_override.end())
        re.m_copy->envelopes().set(re.m_override_op, d, it->second,
                                   Json{{"source", "override"}, {"envelope", it->second}});
    }
  }
  return re;
}

Result<RequestEngine> RequestEngine::for_record(DaemonContext& ctx, const Json& meta) {
  Json params = {{"op", meta.value("op", "")}};
  if (meta.contains("custom_op")) params["custom_op"] = meta["custom_op"];
  const Json src = meta.value("envelope_source", Json::object());
  if (src.value("source", "") == "override" && src.contains("value"))
    params["envelope"] = {{meta.value("dtype", "*"), src["value"]}};
  return make(ctx, params);
}

Json RequestEngine::envelope_source(const std::string& op, DType dtype) const {
  const std::string dt(dtype_name(dtype));
  const double value = engine().envelopes().get(op, dtype);
  if (op == m_override_op && (m_override.count(dt) || m_override.count("*")))
    return {{"value", value}, {"source", "override"}};
  if (engine().envelopes().has(op, dtype)) {
    Json j = {{"value", value}, {"source", "table"}};
    const Json all = engine().envelopes().to_json();
    if (all["envelopes"].contains(op) && all["envelopes"][op].contains(dt))
      j["provenance"] = all["envelopes"][op][dt];
    return j;
  }
  return {{"value", value}, {"source", "fallback"}};
}

Json RequestEngine::record_meta(const TestCase& c) const {
  Json m = {{"envelope_source", envelope_source(c.op, c.dtype)}};
  if (!m_custom.is_null()) {
    m["custom_op"] = m_custom;
    m["schema_version"] = m_custom.value("schema_version", 1);
  }
  return m;
}

}  // namespace gpuemu::server
