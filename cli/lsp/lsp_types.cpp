#include "lsp/lsp_types.hpp"

#include <cctype>
#include <cstdio>

namespace gpuemu::lsp {

Json to_json(const Position& p) {
  return {{"line", p.line}, {"character", p.character}};
}

Json to_json(const Range& r) {
  return {{"start", to_json(r.start)}, {"end", to_json(r.end)}};
}

Json to_json(const Diagnostic& d) {
  Json j = {{"range", to_json(d.range)},
            {"severity", static_cast<int>(d.severity)},
            {"source", d.source},
            {"message", d.message}};
  if (!d.code.empty()) j["code"] = d.code;
  if (!d.data.is_null()) j["data"] = d.data;
  return j;
}

namespace {

Error field_error(const std::string& path, const char* key, const char* expected) {
  return make_error(ErrorCode::invalid_argument, path + "." + key + ": expected " + expected);
}

}  // namespace

Result<const Json*> object_at(const Json& parent, const char* key, const std::string& path) {
  if (!parent.is_object())
    return make_error(ErrorCode::invalid_argument, path + ": expected an object");
  auto it = parent.find(key);
  if (it == parent.end() || !it->is_object()) return field_error(path, key, "an object");
  return &*it;
}

Result<std::string> string_at(const Json& object, const char* key, const std::string& path) {
  if (!object.is_object())
    return make_error(ErrorCode::invalid_argument, path + ": expected an object");
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return field_error(path, key, "a string");
  return it->get<std::string>();
}

Result<int> int_at(const Json& object, const char* key, const std::string& path) {
  if (!object.is_object())
    return make_error(ErrorCode::invalid_argument, path + ": expected an object");
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer() || it->get<long long>() < 0 ||
      it->get<long long>() > (1LL << 30))
    return field_error(path, key, "a non-negative integer");
  return static_cast<int>(it->get<long long>());
}

Result<Position> position_at(const Json& object, const char* key, const std::string& path) {
  GPUEMU_TRY(const Json* p, object_at(object, key, path));
  const std::string here = path + "." + key;
  Position pos;
  GPUEMU_TRY(pos.line, int_at(*p, "line", here));
  GPUEMU_TRY(pos.character, int_at(*p, "character", here));
  return pos;
}

std::string uri_to_path(const std::string& uri) {
  std::string rest = uri;
  if (rest.rfind("file://", 0) == 0) rest = rest.substr(7);
  std::string out;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '%' && i + 2 < rest.size() &&
        std::isxdigit(static_cast<unsigned char>(rest[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(rest[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(rest.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(rest[i]);
    }
  }
  return out;
}

std::string path_to_uri(const std::string& path) {
  std::string out = "file://";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace gpuemu::lsp
