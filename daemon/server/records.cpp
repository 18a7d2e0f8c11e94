// Failure records (docs/store.md, "Record meta") and kernel resolution.
#include "records.hpp"

#include "request_engine.hpp"
#include "gpuemu/script/script_kernel.hpp"

#include <gpuemu/engine/error_map.hpp>

#include <cmath>
#include <cstdio>

namespace gpuemu::server {

namespace {

// A cell's error with three significant digits (the map is for the eye); null for infinity.
Json cell_json(double v) {
  if (!std::isfinite(v)) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return std::strtod(buf, nullptr);
}

}  // namespace

Json error_map_json(const ErrorMap& m) {
  Json cells = Json::array();
  for (double v : m.cells) cells.push_back(cell_json(v));
  return {{"output", m.output},
          {"shape", m.shape},
          {"rows", m.rows},
          {"cols", m.cols},
          {"cell", {m.cell_rows, m.cell_cols}},
          {"size", {m.map_rows, m.map_cols}},
          {"envelope", m.envelope},
          {"max_error", cell_json(m.max_error)},
          {"over", m.over},
          {"cells", std::move(cells)}};
}

Result<std::optional<KernelRunner>> resolve_kernel(const DaemonContext& ctx, const std::string& op,
                                                   const Json& kernel, const RequestEngine* re) {
  if (!kernel.is_object())
    return make_error(ErrorCode::invalid_argument, "'kernel' must be an object with a 'kind'");
  const std::string kind = kernel.value("kind", "");
  if (kind == "builtin") {
    GPUEMU_TRY(std::string name, string_param(kernel, "name"));
    GPUEMU_TRY(KernelRunner r, (re ? re->engine() : ctx.engine).builtin_kernel(op, name));
    return std::optional<KernelRunner>(std::move(r));
  }
  if (kind == "script") {
    GPUEMU_TRY_STATUS(remote_script_allowed(ctx.config, "a script kernel"));
    script::ScriptKernelSpec spec;
    GPUEMU_TRY(spec.script, string_param(kernel, "script"));
    GPUEMU_TRY(spec.function, string_param(kernel, "function"));
    spec.framework = kernel.value("framework", "numpy");
    spec.python = kernel.value("python", ctx.config.python);
    spec.device = kernel.value("device", "cpu");
    spec.timeout_s = kernel.value("timeout_s", ctx.config.script_timeout_s);
    spec.memory_limit_mb = ctx.config.script_memory_mb;
    if (!(spec.timeout_s > 0))
      return make_error(ErrorCode::invalid_argument, "'timeout_s' must be positive");
    if (spec.framework != "numpy" && spec.framework != "torch")
      return make_error(ErrorCode::invalid_argument,
                        "framework '" + spec.framework + "' is not supported (numpy, torch)");
    if (re) spec.catalogue = re->catalogue();
    GPUEMU_TRY(KernelRunner r, script::make_script_kernel(spec));
    return std::optional<KernelRunner>(std::move(r));
  }
  if (kind == "client") return std::optional<KernelRunner>();
  return make_error(ErrorCode::invalid_argument,
                    "kernel kind '" + kind + "' is not one of builtin, script, client");
}

Json kernel_identity(const Json& kernel) {
  Json k = Json::object();
  if (!kernel.is_object()) return k;
  for (const char* f :
       {"kind", "name", "file", "line", "script", "function", "framework", "device"})
    if (kernel.contains(f)) k[f] = kernel[f];
  return k;
}

FailureRecord make_failure_record(const DaemonContext& ctx, const CaseResult& f,
                                  const FuzzOptions& options, const Json& kernel,
                                  const Json& client, const RequestEngine* re) {
  const TestCase& c = f.test_case;
  FailureRecord rec;
  rec.op = c.op;
  Json m = protocol::case_to_json(c);
  m.erase("inputs");
  m["sub_seed_path"] = "case:" + std::to_string(c.index);
  if (const OpSchema* schema = ctx.engine.catalogue().find(c.op))
    m["schema_version"] = schema->version;
  m["options"] = protocol::options_to_json(options);
  m["layouts"] = Json::object();
  m["shapes"] = Json::object();
  m["strides"] = Json::object();
  for (const auto& [n, t] : c.inputs) {
    auto lay = c.layouts.find(n);
    m["layouts"][n] = lay == c.layouts.end() ? "contiguous" : lay->second.kind;
    m["shapes"][n] = t.shape();
    m["strides"][n] = t.strides();
  }
  m["verdict"] = f.verdict.to_json();
  m["max_error"] = m["verdict"].value("max_error", Json());
  m["envelope"] = f.verdict.envelope;
  m["message"] = f.verdict.message;
  if (!f.kernel_error.empty()) m["kernel_error"] = f.kernel_error;
  m["diagnosis"] = f.diagnosis.to_json();
  if (auto map = make_error_map(f.verdict)) m["error_map"] = error_map_json(*map);
  m["kernel"] = kernel_identity(kernel);
  m["client"] = client.is_object() ? client : Json::object();
  m["gpuemu_version"] = GPUEMU_VERSION;
  if (re) m.update(re->record_meta(c));
  rec.meta = std::move(m);
  rec.inputs = protocol::snapshot_case(c);
  return rec;
}

Json failure_list_item(const FailureSummary& s) {
  const Json& m = s.meta;
  return {{"id", s.id},
          {"op", s.op},
          {"seed", m.value("seed", Json())},
          {"master_seed", m.value("master_seed", Json())},
          {"index", m.value("index", Json())},
          {"dtype", m.value("dtype", Json())},
          {"dims", m.value("dims", Json::object())},
          {"created_ms", s.created_ms},
          {"max_error", m.value("max_error", Json())},
          {"envelope", m.value("envelope", Json())},
          {"message", m.value("message", Json())},
          {"bug_class", m.contains("diagnosis") ? m["diagnosis"].value("bug_class", "") : ""},
          {"kernel", m.value("kernel", Json::object())},
          {"shapes", m.value("shapes", Json::object())},
          {"diagnosis", m.value("diagnosis", Json::object())},
          {"minimized_from", m.value("minimized_from", Json())},
          {"input_bytes", s.input_bytes}};
}

Result<StoredCase> load_stored_case(const DaemonContext& ctx, const std::string& id) {
  if (!ctx.store) return make_error(ErrorCode::unavailable, "this daemon has no failure store");
  GPUEMU_TRY(FailureRecord rec, ctx.store->get_failure(id));
  StoredCase sc;
  GPUEMU_TRY(sc.test_case, protocol::restore_case(rec.inputs));
  GPUEMU_TRY(sc.options, protocol::options_from_json(rec.meta.value("options", Json::object())));
  sc.meta = std::move(rec.meta);
  sc.meta["id"] = rec.id;
  sc.meta["created_ms"] = rec.created_ms;
  return sc;
}

Json case_result_json(const CaseResult& r, const std::string& failure_id) {
  Json j = r.to_json(false);
  j["case"] = protocol::case_to_json(r.test_case);
  if (!failure_id.empty()) {
    j["id"] = failure_id;
    j["repro"] = "gpuemu repro " + failure_id;
    j["replay"] = r.repro;
  }
  return j;
}

}  // namespace gpuemu::server
