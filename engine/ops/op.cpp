#include "gpuemu/engine/op.hpp"

#include "fuzz/shape_sampler.hpp"
#include "ops/register.hpp"

#include <mutex>

namespace gpuemu {

const RefArg& RefContext::input(std::string_view name) const {
  auto it = inputs.find(name);
  if (it == inputs.end())
    throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                     "missing input '" + std::string(name) + "'"));
  return it->second;
}

namespace {
const Json& attr_value(const AttrMap& attrs, std::string_view name) {
  auto it = attrs.find(std::string(name));
  if (it == attrs.end())
    throw GpuemuException(
        make_error(ErrorCode::invalid_argument, "missing attr '" + std::string(name) + "'"));
  return *it;
}
[[noreturn]] void bad_attr(std::string_view name, const char* want) {
  throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                   "attr '" + std::string(name) + "' must be " + want));
}
}  // namespace

bool RefContext::attr_is_null(std::string_view name) const {
  auto it = attrs.find(std::string(name));
  return it == attrs.end() || it->is_null();
}

bool RefContext::attr_bool(std::string_view name) const {
  const Json& v = attr_value(attrs, name);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  bad_attr(name, "a bool");
}

std::int64_t RefContext::attr_int(std::string_view name) const {
  const Json& v = attr_value(attrs, name);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  bad_attr(name, "an integer");
}

double RefContext::attr_float(std::string_view name) const {
  const Json& v = attr_value(attrs, name);
  if (v.is_number()) return v.get<double>();
  bad_attr(name, "a number");
}

std::string RefContext::attr_string(std::string_view name) const {
  const Json& v = attr_value(attrs, name);
  if (v.is_string()) return v.get<std::string>();
  bad_attr(name, "a string");
}

std::vector<std::int64_t> RefContext::attr_ints(std::string_view name, std::size_t n) const {
  const Json& v = attr_value(attrs, name);
  if (v.is_number_integer()) return std::vector<std::int64_t>(n, v.get<std::int64_t>());
  if (v.is_array() && v.size() == n) {
    std::vector<std::int64_t> out;
    for (const auto& e : v) {
      if (!e.is_number_integer()) bad_attr(name, "a list of integers");
      out.push_back(e.get<std::int64_t>());
    }
    return out;
  }
  if (v.is_array() && v.size() == 1 && v[0].is_number_integer())
    return std::vector<std::int64_t>(n, v[0].get<std::int64_t>());
  bad_attr(name, ("an integer or a list of " + std::to_string(n) + " integers").c_str());
}

DType RefContext::output_dtype(std::size_t index) const {
  if (!schema || index >= schema->outputs.size()) return case_dtype;
  const std::string& rule = schema->outputs[index].dtype;
  if (rule == "case") return case_dtype;
  if (rule.rfind("like:", 0) == 0) {
    auto it = inputs.find(rule.substr(5));
    return it != inputs.end() ? it->second.dtype : case_dtype;
  }
  if (rule.rfind("attr:", 0) == 0) {
    auto it = attrs.find(rule.substr(5));
    if (it != attrs.end() && it->is_string())
      if (auto d = parse_dtype(it->get<std::string>())) return *d;
    return case_dtype;
  }
  if (auto d = parse_dtype(rule)) return *d;
  return case_dtype;
}

BuiltinRegistry& BuiltinRegistry::instance() {
  static BuiltinRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] { ops::register_all_builtin_ops(registry); });
  return registry;
}

void BuiltinRegistry::add(BuiltinOp op) {
  std::string name = op.name;
  m_ops.insert_or_assign(std::move(name), std::move(op));
}

const BuiltinOp* BuiltinRegistry::find(std::string_view name) const {
  auto it = m_ops.find(name);
  return it == m_ops.end() ? nullptr : &it->second;
}

std::vector<std::string> BuiltinRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, op] : m_ops) out.push_back(name);
  return out;
}

Result<std::vector<RefOutput>> run_reference(const OpSchema& schema, const RefContext& ctx) {
  if (schema.external_reference) return schema.external_reference->run(ctx);
  const std::string& ref = schema.reference;
  if (ref.rfind("torch:", 0) == 0)
    return make_error(ErrorCode::invalid_argument,
                      "op '" + schema.name + "': its reference is PyTorch code held by the Python process "
                      "that made it (gpuemu.torch_op): run it from there");
  if (ref.rfind("builtin:", 0) != 0)
    return make_error(ErrorCode::invalid_argument,
                      "op '" + schema.name + "': reference '" + ref +
                          "' runs in a script, which needs the daemon (gpuemu fuzz --script)");
  const BuiltinOp* op = BuiltinRegistry::instance().find(ref.substr(8));
  if (!op)
    return make_error(ErrorCode::schema_error,
                      schema.source_file + ": no built-in reference named '" + ref.substr(8) + "'");
  try {
    return op->reference(ctx);
  } catch (const GpuemuException& e) {
    return e.error();
  } catch (const std::exception& e) {
    return make_error(ErrorCode::internal, std::string("reference failed: ") + e.what());
  }
}

std::optional<Shape> expected_output_shape(const OpSchema& schema, const RefContext& ctx, std::size_t index) {
  if (index >= schema.outputs.size()) return std::nullopt;
  const Json& rule = schema.outputs[index].shape;
  if (rule.is_string()) {
    const std::string& text = rule.get_ref<const std::string&>();
    if (text.rfind("like:", 0) != 0) return std::nullopt;  // a description
    auto it = ctx.inputs.find(std::string_view(text).substr(5));
    if (it == ctx.inputs.end()) return std::nullopt;
    return it->second.shape;
  }
  if (!rule.is_array()) return std::nullopt;
  for (const auto& in : schema.inputs)
    if (in.any_leading_dims) return std::nullopt;  // the caller's rank, not the schema's
  Shape out;
  for (const auto& e : rule) {
    if (e.is_number_integer()) {
      out.push_back(e.get<std::int64_t>());
      continue;
    }
    if (!e.is_string()) return std::nullopt;
    auto v = eval_expr(e.get<std::string>(), ctx.dims, ctx.attrs);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

Status check_reference_shapes(const OpSchema& schema, const RefContext& ctx,
                              const std::vector<RefOutput>& outputs, const std::string& who) {
  for (std::size_t i = 0; i < outputs.size() && i < schema.outputs.size(); ++i) {
    const auto want = expected_output_shape(schema, ctx, i);
    if (!want || *want == outputs[i].shape) continue;
    const Json& rule = schema.outputs[i].shape;
    return make_error(ErrorCode::invalid_argument,
                      "the reference " + who + " returned output '" + schema.outputs[i].name + "' of shape " +
                          shape_to_string(outputs[i].shape) + ", but op '" + schema.name + "' gives it " +
                          shape_to_string(*want) + " for this case (schema: \"shape\": " + rule.dump() +
                          ", dims " + Json(ctx.dims).dump() +
                          "): the reference is wrong, not the kernel; no case was judged by it");
  }
  return {};
}

}  // namespace gpuemu
