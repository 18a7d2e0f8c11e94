// The command table and request dispatch (docs/protocol.md, "Requests").
#include "daemon_context.hpp"

#include "gpuemu/protocol/wire/registry.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>

namespace gpuemu::server {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = [] {
    HandlerTable handlers;
    add_info_handlers(handlers);
    add_fuzz_handlers(handlers);
    add_failure_handlers(handlers);
    add_lint_handlers(handlers);
    add_coverage_handlers(handlers);
    add_scale_handlers(handlers);
    std::vector<Command> t;
    for (const wire::MethodInfo& m : wire::methods()) {
      auto it = handlers.find(m.name);
      if (it == handlers.end())
        throw std::logic_error("method '" + std::string(m.name) + "' has no handler");
      t.push_back({std::string(m.name), it->second, m.fast, std::string(m.summary)});
      handlers.erase(it);
    }
    if (!handlers.empty())
      throw std::logic_error("handler '" + handlers.begin()->first +
                             "' is of no method of wire::methods()");
    return t;
  }();
  return table;
}

const Command* find_command(std::string_view name) {
  for (const auto& c : commands())
    if (c.name == name) return &c;
  return nullptr;
}

const Json& request_params(const protocol::Frame& request) {
  static const Json empty = Json::object();
  auto it = request.header.find("params");
  return it == request.header.end() || it->is_null() ? empty : *it;
}

Result<std::string> string_param(const Json& params, const char* name) {
  auto it = params.find(name);
  if (it == params.end() || !it->is_string() || it->get<std::string>().empty())
    return wire::missing_string(name);
  return it->get<std::string>();
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

protocol::Frame dispatch(DaemonContext& ctx, const protocol::Frame& request) {
  const Json& h = request.header;
  const auto start = std::chrono::steady_clock::now();
  const std::string method =
      h.contains("method") && h["method"].is_string() ? h["method"].get<std::string>() : "";
  auto fail = [&](const Error& e) {
    ++ctx.errors;
    spdlog::info("{} -> {}: {}", method.empty() ? "?" : method, error_code_name(e.code), e.message);
    return protocol::make_error_reply(e);
  };
  if (!h.contains("v") || !h["v"].is_number_integer())
    return fail(make_error(ErrorCode::protocol_error,
                           "the request header has no integer 'v' (protocol version)"));
  if (h["v"].get<int>() != protocol::k_protocol_version)
    return fail(make_error(ErrorCode::protocol_error,
                           "protocol version " + std::to_string(h["v"].get<int>()) +
                               " is not supported (this daemon speaks " +
                               std::to_string(protocol::k_protocol_version) + ")"));
  if (method.empty())
    return fail(make_error(ErrorCode::protocol_error, "the request header has no string 'method'"));
  const Command* cmd = find_command(method);
  if (!cmd) return fail(make_error(ErrorCode::protocol_error, "unknown method '" + method + "'"));
  if (h.contains("params") && !h["params"].is_object())
    return fail(make_error(ErrorCode::protocol_error, "'params' must be an object"));
  if (ctx.stopping && method != "ping" && method != "hello" && method != "stats")
    return fail(make_error(ErrorCode::unavailable, "the daemon is shutting down"));
  ++ctx.requests;
  Result<protocol::Frame> reply = [&]() -> Result<protocol::Frame> {
    try {
      return cmd->handler(ctx, request);
    } catch (const GpuemuException& e) {
      return e.error();
    } catch (const std::bad_alloc&) {
      return make_error(ErrorCode::internal, "out of memory while handling '" + method + "'");
    } catch (const std::exception& e) {
      return make_error(ErrorCode::internal, "'" + method + "' failed: " + e.what());
    }
  }();
  if (!reply) return fail(reply.error());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!cmd->fast) spdlog::info("{} ok in {:.1f} ms", method, ms);
  return std::move(reply).value();
}

}  // namespace gpuemu::server
