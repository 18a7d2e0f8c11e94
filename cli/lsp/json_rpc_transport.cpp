#include "lsp/json_rpc_transport.hpp"

#include <cctype>
#include <cstdlib>
#include <string_view>

namespace gpuemu::lsp {
namespace {

constexpr std::size_t k_max_message = std::size_t{256} << 20;

// One header line without its "\r\n"; nullopt at the end of the input.
std::optional<std::string> read_line(std::FILE* in) {
  std::string line;
  for (;;) {
    const int c = std::fgetc(in);
    if (c == EOF) {
      if (line.empty()) return std::nullopt;
      return line;
    }
    if (c == '\n') {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    line.push_back(static_cast<char>(c));
    if (line.size() > 4096) return line;  // a header this long is malformed; reported below
  }
}

bool iequals_prefix(std::string_view line, std::string_view prefix) {
  if (line.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  return true;
}

}  // namespace

Result<std::optional<Json>> JsonRpcTransport::read() {
  std::optional<std::size_t> length;
  bool any_header = false;
  for (;;) {
    auto line = read_line(m_in);
    if (!line) {
      if (!any_header) return std::optional<Json>();
      return make_error(ErrorCode::protocol_error, "the input ended inside a message header");
    }
    if (line->empty()) {
      if (!any_header) continue;  // stray blank line between messages
      break;
    }
    any_header = true;
    if (line->size() > 4096)
      return make_error(ErrorCode::protocol_error, "a header line is longer than 4096 bytes");
    if (iequals_prefix(*line, "content-length:")) {
      const std::string value = line->substr(15);
      char* end = nullptr;
      const unsigned long long n = std::strtoull(value.c_str(), &end, 10);
      if (end == value.c_str() || n > k_max_message)
        return make_error(ErrorCode::protocol_error, "bad Content-Length '" + value + "'");
      length = static_cast<std::size_t>(n);
    }
  }
  if (!length) return make_error(ErrorCode::protocol_error, "a message without Content-Length");
  std::string body(*length, '\0');
  if (*length > 0 && std::fread(body.data(), 1, *length, m_in) != *length)
    return make_error(ErrorCode::protocol_error, "the input ended inside a message body");
  try {
    return std::optional<Json>(Json::parse(body));
  } catch (const Json::parse_error& e) {
    return make_error(ErrorCode::protocol_error, std::string("the body is not JSON: ") + e.what());
  } catch (const Json::exception& e) {  // a number past double's range: out_of_range
    return make_error(ErrorCode::protocol_error, std::string("the body is not JSON: ") + e.what());
  }
}

void JsonRpcTransport::send(const Json& message) {
  const std::string body = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::lock_guard lock(m_write);
  std::fprintf(m_out, "Content-Length: %zu\r\n\r\n", body.size());
  std::fwrite(body.data(), 1, body.size(), m_out);
  std::fflush(m_out);
}

void JsonRpcTransport::notify(const std::string& method, Json params) {
  send({{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
}

void JsonRpcTransport::reply(const Json& id, Json result) {
  send({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
}

void JsonRpcTransport::reply_error(const Json& id, int code, const std::string& message) {
  send({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}});
}

void JsonRpcTransport::request(const std::string& method, Json params) {
  long long id = 0;
  {
    std::lock_guard lock(m_write);
    id = m_next_id++;
  }
  send({{"jsonrpc", "2.0"},
        {"id", "gpuemu-" + std::to_string(id)},
        {"method", method},
        {"params", std::move(params)}});
}

}  // namespace gpuemu::lsp
