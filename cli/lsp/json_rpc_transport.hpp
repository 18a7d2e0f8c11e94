// JSON-RPC 2.0 over a byte stream with LSP's base protocol framing ("Content-Length: N\r\n\r\n"
// then N bytes of UTF-8 JSON), as clangd's Transport: it knows messages, not methods. Reading is
// done by one thread; writes may come from any thread (they are serialised).
#pragma once

#include <gpuemu/base/error.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

namespace gpuemu::lsp {

using Json = nlohmann::json;

// JSON-RPC / LSP error codes.
inline constexpr int k_parse_error = -32700;
inline constexpr int k_invalid_request = -32600;
inline constexpr int k_method_not_found = -32601;
inline constexpr int k_invalid_params = -32602;
inline constexpr int k_internal_error = -32603;
inline constexpr int k_server_not_initialized = -32002;
inline constexpr int k_request_failed = -32803;

class JsonRpcTransport {
 public:
  // Reads from `in`, writes to `out` (stdin and stdout for `gpuemu lsp`).
  JsonRpcTransport(std::FILE* in, std::FILE* out) : m_in(in), m_out(out) {}

  // The next message; nullopt at the end of the input. A malformed frame or body is an error
  // (the caller answers it with k_parse_error and goes on reading).
  Result<std::optional<Json>> read();

  void send(const Json& message);
  void notify(const std::string& method, Json params);
  void reply(const Json& id, Json result);
  void reply_error(const Json& id, int code, const std::string& message);
  // A request from the server to the client (window/showDocument, ...); its reply is ignored.
  void request(const std::string& method, Json params);

 private:
  std::FILE* m_in;
  std::FILE* m_out;
  std::mutex m_write;
  long long m_next_id = 1;
};

}  // namespace gpuemu::lsp
