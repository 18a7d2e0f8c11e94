#include "gpuemu/base/error.hpp"

namespace gpuemu {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::unknown_op: return "unknown_op";
    case ErrorCode::schema_error: return "schema_error";
    case ErrorCode::shape_mismatch: return "shape_mismatch";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::io_error: return "io_error";
    case ErrorCode::tool_missing: return "tool_missing";
    case ErrorCode::internal: return "internal";
    case ErrorCode::protocol_error: return "protocol_error";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::conflict: return "conflict";
    case ErrorCode::storage_full: return "storage_full";
  }
  return "internal";
}

std::optional<ErrorCode> parse_error_code(std::string_view name) {
  for (ErrorCode c : k_all_error_codes)
    if (error_code_name(c) == name) return c;
  return std::nullopt;
}

std::string Error::what() const { return std::string(error_code_name(code)) + ": " + message; }

}  // namespace gpuemu
