// The LSP structures `gpuemu lsp` uses, declared once with their JSON (as clangd's Protocol.h):
// handlers take and return these; reading a field that is missing or of the wrong type is an
// error naming its path ("params.textDocument.uri: expected a string").
#pragma once

#include <gpuemu/base/error.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gpuemu::lsp {

using Json = nlohmann::json;

struct Position {
  int line = 0;       // 0-based
  int character = 0;  // 0-based, UTF-16 code units (gpuemu's text is ASCII where it points)
};

struct Range {
  Position start, end;
};

enum class Severity { error = 1, warning = 2, information = 3, hint = 4 };

struct Diagnostic {
  Range range;
  Severity severity = Severity::error;
  std::string source = "gpuemu";
  std::string code;  // a bug class, or a gpuemu.toml problem kind
  std::string message;
  Json data;  // failure diagnostics: {failure_id, op, dtype, seed, kernel, ...}
};

Json to_json(const Position& p);
Json to_json(const Range& r);
Json to_json(const Diagnostic& d);

// Field readers: `path` names the object read ("params.textDocument").
Result<const Json*> object_at(const Json& parent, const char* key, const std::string& path);
Result<std::string> string_at(const Json& object, const char* key, const std::string& path);
Result<int> int_at(const Json& object, const char* key, const std::string& path);
Result<Position> position_at(const Json& object, const char* key, const std::string& path);

// file:// URIs and paths (percent-decoding and -encoding of what is not unreserved or '/').
std::string uri_to_path(const std::string& uri);
std::string path_to_uri(const std::string& path);

}  // namespace gpuemu::lsp
