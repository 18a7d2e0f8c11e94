// hello, ping, stats, list_ops, describe_op, shutdown.
#include "server/daemon_context.hpp"

#include <unistd.h>

namespace gpuemu::server {
namespace {

using protocol::Frame;
using protocol::make_reply;

Json identity(const DaemonContext& ctx) {
  return {{"pid", static_cast<std::int64_t>(getpid())},
          {"version", GPUEMU_VERSION},
          {"protocol", protocol::k_protocol_version},
          {"socket", ctx.paths.socket},
          {"home", ctx.paths.home},
          {"started_ms", ctx.started_ms},
          {"uptime_s", ctx.uptime_s()},
          {"stopping", ctx.stopping.load()}};
}

Result<Frame> hello(DaemonContext& ctx, const Frame&) {
  Json j = identity(ctx);
  j["capabilities"] = protocol::capabilities();
  j["methods"] = Json::array();
  for (const auto& c : commands()) j["methods"].push_back(c.name);
  return make_reply(j);
}

Result<Frame> ping(DaemonContext& ctx, const Frame&) {
  Json j = {{"pong", true}, {"uptime_s", ctx.uptime_s()}, {"stopping", ctx.stopping.load()}};
  // Failures or runs stored or deleted since the daemon started: editors poll this (cheap) and
  // list failures again only when it moves (with started_ms, which tells a restarted daemon).
  if (ctx.store) j["changes"] = ctx.store->changes();
  j["started_ms"] = ctx.started_ms;
  return make_reply(j);
}

Result<Frame> stats(DaemonContext& ctx, const Frame&) {
  Json j = identity(ctx);
  j["requests"] = ctx.requests.load();
  j["in_flight"] = ctx.in_flight.load();
  j["errors"] = ctx.errors.load();
  j["stopping"] = ctx.stopping.load();
  if (ctx.store) {
    if (auto s = ctx.store->stats())
      j["store"] = {{"dir", ctx.store->dir()},   {"version", s->version},
                    {"failures", s->failures},   {"calibrations", s->calibrations},
                    {"baselines", s->baselines}, {"runs", s->runs},
                    {"map_bytes", s->map_bytes}, {"used_bytes", s->used_bytes}};
  }
  if (ctx.case_cache)
    j["case_cache"] = {{"limit_bytes", ctx.case_cache->limit_bytes()},
                       {"bytes", ctx.case_cache->bytes()},
                       {"cases", ctx.case_cache->size()},
                       {"hits", ctx.case_cache->hits()},
                       {"misses", ctx.case_cache->misses()}};
  return make_reply(j);
}

Result<Frame> list_ops(DaemonContext& ctx, const Frame&) {
  Json ops = Json::array();
  for (const OpSchema* s : ctx.engine.catalogue().all()) {
    Json dts = Json::array();
    for (DType d : s->dtypes) dts.push_back(std::string(dtype_name(d)));
    ops.push_back({{"name", s->name},
                   {"family", s->family},
                   {"summary", s->summary},
                   {"version", s->version},
                   {"dtypes", dts},
                   {"kernels", ctx.engine.builtin_kernel_names(s->name)}});
  }
  return make_reply({{"ops", ops}});
}

Result<Frame> describe_op(DaemonContext& ctx, const Frame& req) {
  const Json params = req.header.value("params", Json::object());
  GPUEMU_TRY(std::string op, string_param(params, "op"));
  GPUEMU_TRY(const OpSchema* s, ctx.engine.catalogue().get(op));
  Json j = s->raw;
  j["source"] = s->source_file;
  j["kernels"] = ctx.engine.builtin_kernel_names(op);
  {
    std::shared_lock lock(ctx.engine_mutex);
    Json env = Json::object();
    for (DType d : s->dtypes) env[std::string(dtype_name(d))] = ctx.engine.envelopes().get(op, d);
    j["envelopes"] = env;
  }
  return make_reply(j);
}

Result<Frame> shutdown(DaemonContext& ctx, const Frame&) {
  // Stopping from this reply on, not from the main loop's next tick (up to 100 ms later): a client
  // that says hello in between must not take this daemon for one that serves.
  ctx.stopping = true;
  if (ctx.request_stop) ctx.request_stop();
  return make_reply({{"stopping", true}, {"pid", static_cast<std::int64_t>(getpid())}});
}

}  // namespace

void add_info_commands(std::vector<Command>& out) {
  out.push_back({"hello", hello, true, "version, protocol and capability names"});
  out.push_back({"ping", ping, true, "liveness"});
  out.push_back({"stats", stats, true, "counters, uptime and the store's size"});
  out.push_back({"list_ops", list_ops, false, "every op of the catalogue"});
  out.push_back(
      {"describe_op", describe_op, false, "one op's schema, built-in kernels and envelopes"});
  out.push_back({"shutdown", shutdown, true, "graceful stop: in-flight requests finish"});
}

}  // namespace gpuemu::server
