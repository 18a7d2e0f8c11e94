#include "gpuemu/error.hpp"

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
  }
  return "internal";
}

std::string Error::what() const { return std::string(error_code_name(code)) + ": " + message; }

}  // namespace gpuemu
