// Recoverable errors as values. Every failure the engine can report carries an ErrorCode (machine
// readable; the daemon's wire error codes map one to one onto it) and a short message.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpuemu {

enum class ErrorCode {
  invalid_argument,   // a caller's value is wrong (bad dims, bad attr, bad dtype name)
  unknown_op,         // no schema by that name
  schema_error,       // a schema file is malformed (message carries file and line)
  shape_mismatch,     // tensors whose shapes or dtypes disagree with the op
  not_found,          // a stored object (failure, baseline) does not exist
  io_error,           // a file could not be read or written
  tool_missing,       // an external tool (nvcc, ptxas, python) is absent
  internal,           // a bug in gpuemu
  protocol_error,     // a malformed or unsupported wire message
  timeout,            // a request, a kernel script or a daemon start took too long
  unavailable,        // no daemon answers, or it is shutting down
  conflict,           // another daemon already owns this GPUEMU_HOME, or a stored object clashes
  storage_full,       // the failure store cannot grow (disk or map limit)
};

// Every code, in declaration order (the wire error codes are these names).
inline constexpr ErrorCode k_all_error_codes[] = {
    ErrorCode::invalid_argument, ErrorCode::unknown_op,   ErrorCode::schema_error,
    ErrorCode::shape_mismatch,   ErrorCode::not_found,    ErrorCode::io_error,
    ErrorCode::tool_missing,     ErrorCode::internal,     ErrorCode::protocol_error,
    ErrorCode::timeout,          ErrorCode::unavailable,  ErrorCode::conflict,
    ErrorCode::storage_full};
std::optional<ErrorCode> parse_error_code(std::string_view name);

std::string_view error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;
  std::string what() const;  // "<code>: <message>"
};

// Thrown only at boundaries (CLI, pybind) that want exceptions; carries the Error.
class GpuemuException : public std::runtime_error {
 public:
  explicit GpuemuException(Error error)
      : std::runtime_error(error.message), m_error(std::move(error)) {}
  const Error& error() const { return m_error; }

 private:
  Error m_error;
};

// A minimal expected<T, Error> (std::expected is not in GCC 12).
template <typename T>
class Result {
 public:
  Result(T value) : m_value(std::move(value)) {}  // NOLINT(implicit)
  Result(Error error) : m_value(std::move(error)) {}  // NOLINT(implicit)

  bool ok() const { return m_value.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return check(), std::get<0>(m_value); }
  const T& value() const& { return check(), std::get<0>(m_value); }
  T&& value() && { return check(), std::get<0>(std::move(m_value)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(m_value); }

 private:
  void check() const {
    if (!ok()) throw GpuemuException(std::get<1>(m_value));
  }
  std::variant<T, Error> m_value;
};

// Result<void>.
class Status {
 public:
  Status() = default;
  Status(Error error) : m_error(std::move(error)) {}  // NOLINT(implicit)
  bool ok() const { return !m_error; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *m_error; }

 private:
  std::optional<Error> m_error;
};

inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

}  // namespace gpuemu

// Propagates an error: `GPUEMU_TRY(auto x, compute());` or `GPUEMU_TRY_STATUS(check());`.
#define GPUEMU_CONCAT_INNER(a, b) a##b
#define GPUEMU_CONCAT(a, b) GPUEMU_CONCAT_INNER(a, b)
#define GPUEMU_TRY(decl, expr)                                   \
  auto GPUEMU_CONCAT(_try_, __LINE__) = (expr);                  \
  if (!GPUEMU_CONCAT(_try_, __LINE__)) return GPUEMU_CONCAT(_try_, __LINE__).error(); \
  decl = std::move(GPUEMU_CONCAT(_try_, __LINE__)).value()
#define GPUEMU_TRY_STATUS(expr)                                  \
  do {                                                           \
    auto _st = (expr);                                           \
    if (!_st) return _st.error();                                \
  } while (0)
