// Script kernels (docs/script-kernels.md): a case as a request to the script process
// (script_process.hpp), and its reply as the engine's outputs.
#include "gpuemu/script/script_kernel.hpp"

#include "gpuemu/protocol/protocol.hpp"
#include "gpuemu/script/script_process.hpp"

#include <mutex>

namespace gpuemu::script {
namespace {

std::shared_ptr<const Catalogue> default_catalogue() {
  static std::once_flag once;
  static std::shared_ptr<const Catalogue> catalogue;
  std::call_once(once, [] {
    if (auto c = Catalogue::load_default()) catalogue = *c;
  });
  return catalogue;
}

// The dtype output `index` must have under the schema's rule (RefContext::output_dtype's rules).
DType expected_output_dtype(const OpSchema* schema, const TestCase& c, std::size_t index) {
  if (!schema || index >= schema->outputs.size()) return c.dtype;
  const std::string& rule = schema->outputs[index].dtype;
  if (rule == "case") return c.dtype;
  if (rule.rfind("like:", 0) == 0) {
    auto it = c.inputs.find(rule.substr(5));
    return it != c.inputs.end() ? it->second.dtype() : c.dtype;
  }
  if (rule.rfind("attr:", 0) == 0) {
    auto it = c.attrs.find(rule.substr(5));
    if (it != c.attrs.end() && it->is_string())
      if (auto d = parse_dtype(it->get<std::string>())) return *d;
    return c.dtype;
  }
  return parse_dtype(rule).value_or(c.dtype);
}

bool numpy_lacks(DType d) {
  return d == DType::bfloat16 || d == DType::float8_e4m3fn || d == DType::float8_e5m2;
}

Result<std::vector<Tensor>> outputs_of(const protocol::Frame& reply, const TestCase& c,
                                       const OpSchema* schema) {
  const Json& h = reply.header;
  if (!h.contains("ok") || !h["ok"].is_boolean())
    return make_error(ErrorCode::protocol_error,
                      "the kernel script's runner sent a reply without a boolean 'ok'");
  if (!h["ok"].get<bool>()) {
    std::string msg = string_field(h, "error", "(no message)");
    const std::string tb = string_field(h, "traceback");
    if (!tb.empty()) msg += "\n" + tail_of(tb, k_script_traceback_report);
    return make_error(ErrorCode::invalid_argument, msg);
  }
  if (!h.contains("outputs") || !h["outputs"].is_array())
    return make_error(ErrorCode::protocol_error,
                      "the kernel script's runner sent a reply without 'outputs'");
  std::vector<Tensor> out;
  for (const auto& key : h["outputs"]) {
    if (!key.is_string())
      return make_error(ErrorCode::protocol_error, "'outputs' must list tensor keys");
    GPUEMU_TRY(Tensor t, reply.tensor(key.get<std::string>()));
    // numpy has no bfloat16 or fp8: float values where one is expected are rounded to it once.
    const DType want = expected_output_dtype(schema, c, out.size());
    if (numpy_lacks(want) && (t.dtype() == DType::float32 || t.dtype() == DType::float64)) {
      const std::vector<double> values = t.to_f64();
      t = Tensor::from_values(want, t.shape(), values);
    }
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<Tensor>> run_case(ScriptProcess& process, const TestCase& c,
                                     const std::shared_ptr<const Catalogue>& given) {
  const std::shared_ptr<const Catalogue> catalogue = given ? given : default_catalogue();
  const OpSchema* schema = catalogue ? catalogue->find(c.op) : nullptr;
  protocol::Frame request;
  request.header = {{"case", protocol::case_to_json(c)}};
  if (schema) {
    Json absent = Json::array();
    for (const auto& in : schema->inputs)
      if (!c.inputs.count(in.name)) absent.push_back(in.name);
    if (!absent.empty()) request.header["absent"] = std::move(absent);
  }
  protocol::add_case_tensors(request, c);
  GPUEMU_TRY(protocol::Frame reply,
             process.exchange(request, "case " + std::to_string(c.index) + " of " + c.op));
  return outputs_of(reply, c, schema);
}

}  // namespace

Result<KernelRunner> make_script_kernel(ScriptKernelSpec spec) {
  std::shared_ptr<const Catalogue> catalogue = spec.catalogue;
  GPUEMU_TRY(std::shared_ptr<ScriptProcess> process,
             start_script_process(std::move(spec), "kernel script"));
  return KernelRunner([process, catalogue](const TestCase& c) {
    return run_case(*process, c, catalogue);
  });
}

}  // namespace gpuemu::script
