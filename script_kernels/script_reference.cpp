// A custom op's Python reference over the script process (script_reference.hpp).
#include "gpuemu/script/script_reference.hpp"

#include "gpuemu/script/script_process.hpp"

#include <cmath>

namespace gpuemu::script {
namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class ScriptReference final : public ExternalReference {
 public:
  explicit ScriptReference(std::shared_ptr<ScriptProcess> process, std::string torch_schema = {})
      : m_process(std::move(process)), m_torch_schema(std::move(torch_schema)) {}

  Result<std::vector<RefOutput>> run(const RefContext& ctx) const override {
    if (!ctx.schema)
      return make_error(ErrorCode::internal, "a script reference needs the op's schema");
    const OpSchema& schema = *ctx.schema;
    protocol::Frame request;
    Json inputs = Json::object();
    Json absent = Json::array();
    for (const auto& in : schema.inputs) {
      auto it = ctx.inputs.find(in.name);
      if (it == ctx.inputs.end()) {
        absent.push_back(in.name);
        continue;
      }
      const RefArg& a = it->second;
      // Floating inputs as float64 (exact: every gpuemu float dtype is a subset of binary64).
      const DType wire = is_floating(a.dtype) ? DType::float64 : a.dtype;
      request.tensors.emplace("inputs/" + in.name, Tensor::from_values(wire, a.shape, a.data));
      inputs[in.name] = {{"dtype", std::string(dtype_name(a.dtype))}};
    }
    request.header = {{"case",
                       {{"op", schema.name},
                        {"dtype", std::string(dtype_name(ctx.case_dtype))},
                        {"dims", ctx.dims},
                        {"attrs", ctx.attrs},
                        {"inputs", inputs}}}};
    if (!absent.empty()) request.header["absent"] = absent;
    // A reference that returns values only gets its condition term derived by the runner
    // (docs/custom-ops.md, "The error model of a custom op").
    const bool torch_op = !m_torch_schema.empty();
    if (torch_op)
      request.header["schema"] = m_torch_schema;
    else
      request.header["derive_bounds"] = schema.outputs.size();
    GPUEMU_TRY(protocol::Frame reply, m_process->exchange(request, "the reference of " + schema.name));
    const Json& h = reply.header;
    const std::string where = m_process->spec().script + ":" + m_process->spec().function;
    if (!h.contains("ok") || !h["ok"].is_boolean())
      return make_error(ErrorCode::protocol_error,
                        "the reference script's runner sent a reply without a boolean 'ok'");
    if (!h["ok"].get<bool>()) {
      std::string msg = "the reference " + where + " raised: " + h.value("error", "(no message)");
      const std::string tb = h.value("traceback", "");
      if (!tb.empty()) msg += "\n" + tail_of(tb, k_script_traceback_report);
      return make_error(ErrorCode::invalid_argument, msg);
    }
    const Json keys = h.value("outputs", Json::array());
    const std::size_t k = schema.outputs.size();
    if (torch_op && keys.size() != 3 * k)
      return make_error(ErrorCode::protocol_error,
                        "the torch op " + where + " returned " + std::to_string(keys.size()) +
                            " arrays for op '" + schema.name + "'; expected " +
                            std::to_string(3 * k) + " (value, c_acc and c_in of each output)");
    if (!torch_op && keys.size() != k && keys.size() != 2 * k)
      return make_error(ErrorCode::invalid_argument,
                        "the reference " + where + " returned " + std::to_string(keys.size()) +
                            " arrays; op '" + schema.name + "' has " + std::to_string(k) +
                            " output(s): return " + std::to_string(k) + " (the values) or " +
                            std::to_string(2 * k) + " (the values, then each one's c_acc)");
    std::vector<RefOutput> out(k);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!keys[i].is_string())
        return make_error(ErrorCode::protocol_error, "'outputs' must list tensor keys");
      GPUEMU_TRY(Tensor t, reply.tensor(keys[i].get<std::string>()));
      RefOutput& o = out[i % k];
      if (i < k) {
        o.name = schema.outputs[i].name;
        o.dtype = ctx.output_dtype(i);
        o.shape = t.shape();
        o.value.resize(static_cast<std::size_t>(t.numel()));
        t.to_f64(o.value.data());
        continue;
      }
      if (t.shape() != o.shape)
        return make_error(ErrorCode::invalid_argument,
                          "the reference " + where + ": the bound of output '" + o.name +
                              "' has shape " + shape_text(t.shape()) + ", its value " +
                              shape_text(o.shape));
      RefVec& dst = i < 2 * k ? o.c_acc : o.c_in;
      dst.resize(static_cast<std::size_t>(t.numel()));
      t.to_f64(dst.data());
      if (torch_op) {
        for (double& c : dst) c = std::isnan(c) ? HUGE_VAL : std::fabs(c);  // no bound: unresolved
      } else {
        for (double& c : dst) c = std::isfinite(c) ? std::fabs(c) : 0.0;
      }
    }
    GPUEMU_TRY_STATUS(check_reference_shapes(schema, ctx, out, where));
    return out;
  }

 private:
  std::shared_ptr<ScriptProcess> m_process;
  std::string m_torch_schema;  // non-empty: a torch op's reference (3 arrays per output)
};

}  // namespace

Result<std::shared_ptr<const ExternalReference>> make_script_reference(ScriptKernelSpec spec) {
  spec.framework = "numpy";  // a reference computes in float64: numpy is all it needs
  spec.device = "cpu";
  GPUEMU_TRY(std::shared_ptr<ScriptProcess> process,
             start_script_process(std::move(spec), "reference script"));
  return std::shared_ptr<const ExternalReference>(std::make_shared<ScriptReference>(process));
}

Result<std::shared_ptr<const ExternalReference>> make_torch_op_reference(ScriptKernelSpec spec,
                                                                        std::string schema_text) {
  spec.framework = "numpy";  // the runner hands the op exact float64 inputs
  spec.device = "cpu";
  spec.mode = "torch_op";
  if (schema_text.empty())
    return make_error(ErrorCode::invalid_argument, "a torch op's reference needs the op's schema");
  GPUEMU_TRY(std::shared_ptr<ScriptProcess> process,
             start_script_process(std::move(spec), "torch op"));
  return std::shared_ptr<const ExternalReference>(
      std::make_shared<ScriptReference>(process, std::move(schema_text)));
}

}  // namespace gpuemu::script
