// The mappers' shared pieces (gpuemu/protocol/wire/fields.hpp).
#include "gpuemu/protocol/wire/fields.hpp"

#include "gpuemu/protocol/protocol.hpp"

namespace gpuemu::wire {

Error wrong_type(std::string_view name) {
  return make_error(ErrorCode::invalid_argument,
                    "parameter '" + std::string(name) + "' has the wrong type");
}

Error missing_string(std::string_view name) {
  return make_error(ErrorCode::invalid_argument,
                    "the request needs a string '" + std::string(name) + "'");
}

std::string action_of(const Json& params, const char* fallback) {
  if (!params.is_object()) return fallback;
  auto it = params.find("action");
  if (it == params.end() || it->is_null()) return fallback;
  return it->is_string() ? it->get<std::string>() : "";
}

const Json* FieldReader::find(const char* name) const {
  if (m_object == nullptr) return nullptr;
  auto it = m_object->find(name);
  if (it == m_object->end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::required(const char* name, std::string& out) {
  if (m_error) return;
  const Json* v = find(name);
  if (v == nullptr || !v->is_string() || v->get_ref<const std::string&>().empty())
    return fail(missing_string(name));
  out = v->get<std::string>();
}

void FieldReader::seed(const char* name, std::optional<std::uint64_t>& out) {
  if (m_error) return;
  const Json* v = find(name);
  if (v == nullptr) return;
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<std::int64_t>() >= 0))
    return fail(make_error(ErrorCode::invalid_argument,
                           "'" + std::string(name) + "' must be a non-negative integer"));
  out = v->get<std::uint64_t>();
}

Result<FuzzOptions> FieldReader::decode_options(const Json& v) {
  return protocol::options_from_json(v);
}

Json FieldWriter::encode_options(const FuzzOptions& o) {
  return protocol::options_to_json(o);
}

}  // namespace gpuemu::wire
