// hello, ping, stats, list_ops, describe_op, shutdown, progress: the info family
// (gpuemu/protocol/wire/info.hpp).
#include "daemon_context.hpp"

#include "gpuemu/engine/oracle_backend.hpp"
#include "gpuemu/protocol/wire/info.hpp"
#include "gpuemu/protocol/wire/registry.hpp"

#include <unistd.h>

namespace gpuemu::server {
namespace {

using protocol::Frame;

wire::Identity identity(const DaemonContext& ctx) {
  wire::Identity id;
  id.pid = static_cast<std::int64_t>(getpid());
  id.version = GPUEMU_VERSION;
  id.protocol = protocol::k_protocol_version;
  id.socket = ctx.paths.socket;
  id.home = ctx.paths.home;
  id.started_ms = ctx.started_ms;
  id.uptime_s = ctx.uptime_s();
  id.stopping = ctx.stopping.load();
  return id;
}

Result<wire::HelloReply> hello(DaemonContext& ctx, const wire::HelloRequest&) {
  wire::HelloReply r;
  r.identity = identity(ctx);
  r.capabilities = protocol::capabilities();
  for (const auto& c : commands()) r.methods.push_back(c.name);
  return r;
}

Result<protocol::Frame> ping(DaemonContext& ctx, const wire::PingRequest& req,
                             const protocol::Frame& request) {
  wire::PingReply r;
  r.uptime_s = ctx.uptime_s();
  r.stopping = ctx.stopping.load();
  // Failures or runs stored or deleted since the daemon started: editors poll this (cheap) and
  // list failures again only when it moves (with started_ms, which tells a restarted daemon).
  if (ctx.store) r.changes = ctx.store->changes();
  r.started_ms = ctx.started_ms;
  protocol::Frame reply = protocol::make_reply(to_json(r));
  if (req.echo) reply.tensors = request.tensors;
  return reply;
}

Result<wire::StatsReply> stats(DaemonContext& ctx, const wire::StatsRequest&) {
  wire::StatsReply r;
  r.identity = identity(ctx);
  r.requests = ctx.requests.load();
  r.in_flight = ctx.in_flight.load();
  r.errors = ctx.errors.load();
  if (ctx.store) {
    if (auto s = ctx.store->stats())
      r.store = wire::StoreSummary{ctx.store->dir(), s->version, s->failures,  s->calibrations,
                                   s->baselines,     s->runs,    s->map_bytes, s->used_bytes};
  }
  if (ctx.case_cache)
    r.case_cache = wire::CaseCacheSummary{ctx.case_cache->limit_bytes(), ctx.case_cache->bytes(),
                                          ctx.case_cache->size(), ctx.case_cache->hits(),
                                          ctx.case_cache->misses()};
  r.shm = wire::ShmSummary{ctx.shm_borrowed_tensors.load(), ctx.shm_borrowed_bytes.load(),
                           ctx.shm_copied_tensors.load(),   ctx.shm_copied_bytes.load(),
                           ctx.shm_owned_tensors.load(),    ctx.shm_owned_bytes.load()};
  r.oracle = oracle_backend::description();
  return r;
}

Result<wire::ListOpsReply> list_ops(DaemonContext& ctx, const wire::ListOpsRequest&) {
  wire::ListOpsReply r;
  for (const OpSchema* s : ctx.engine.catalogue().all()) {
    wire::OpSummary o{s->name,    s->family, s->summary,
                      s->version, {},        ctx.engine.builtin_kernel_names(s->name)};
    for (DType d : s->dtypes) o.dtypes.emplace_back(dtype_name(d));
    r.ops.push_back(std::move(o));
  }
  return r;
}

Result<wire::DescribeOpReply> describe_op(DaemonContext& ctx, const wire::DescribeOpRequest& req) {
  GPUEMU_TRY(const OpSchema* s, ctx.engine.catalogue().get(req.op));
  wire::DescribeOpReply r;
  r.schema = s->raw;
  r.source = s->source_file;
  r.kernels = ctx.engine.builtin_kernel_names(req.op);
  {
    std::shared_lock lock(ctx.engine_mutex);
    for (DType d : s->dtypes)
      r.envelopes[std::string(dtype_name(d))] = ctx.engine.envelopes().get(req.op, d);
  }
  return r;
}

Result<wire::ShutdownReply> shutdown(DaemonContext& ctx, const wire::ShutdownRequest&) {
  // Stopping from this reply on, not from the main loop's next tick (up to 100 ms later): a client
  // that says hello in between must not take this daemon for one that serves.
  ctx.stopping = true;
  if (ctx.request_stop) ctx.request_stop();
  return wire::ShutdownReply{true, static_cast<std::int64_t>(getpid())};
}

// The progress of a running request that carries `progress_token` (fast: never blocks).
Result<wire::ProgressReply> progress(DaemonContext& ctx, const wire::ProgressRequest& req) {
  wire::ProgressReply r;
  r.token = req.token;
  if (auto item = ctx.progress.get(req.token)) {
    r.running = true;
    r.done = item->done;
    r.total = item->total;
  }
  return r;
}

}  // namespace

void add_info_handlers(HandlerTable& out) {
  out["hello"] = typed(hello);
  out["ping"] = typed(ping);
  out["stats"] = typed(stats);
  out["list_ops"] = typed(list_ops);
  out["describe_op"] = typed(describe_op);
  out["shutdown"] = typed(shutdown);
  out["progress"] = typed(progress);
}

}  // namespace gpuemu::server
