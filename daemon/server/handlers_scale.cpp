// Many runners, one place (docs/scale.md): calibrations (list, export, import: shared with their
// provenance) and the outbox of a daemon that pushes to a central one (status, backlog, retry,
// rejected, wait). The central side of a push is `push` (handlers_failures.cpp).
#include "daemon_context.hpp"
#include "pusher.hpp"

#include "gpuemu/protocol/wire/scale.hpp"

#include <cmath>
#include <thread>

namespace gpuemu::server {
namespace {

Result<Store*> store_of(DaemonContext& ctx) {
  if (!ctx.store) return make_error(ErrorCode::unavailable, "this daemon has no store");
  return ctx.store.get();
}

// Keys of a calibration that say where a copy came from, not what it is.
constexpr const char* k_copy_keys[] = {"op", "dtype", "imported_ms", "imported_from", "synced_ms",
                                       "synced_from"};

Json content_of(Json c) {
  for (const char* k : k_copy_keys) c.erase(k);
  return c;
}

// Stored calibrations, each applied to the engine with its provenance; `replace`: "newer" keeps a
// stored calibration made later than the incoming one, "always" takes the incoming one.
Result<wire::CalibrationsReply> import_calibrations(DaemonContext& ctx, Store& store,
                                                    const wire::CalibrationsRequest& p) {
  const Json& records = p.calibrations;
  if (!records.is_array())
    return make_error(ErrorCode::invalid_argument,
                      "'calibrations' must be an array (gpuemu calibrations export writes one)");
  const std::string& replace = p.replace;
  if (replace != "newer" && replace != "always")
    return make_error(ErrorCode::invalid_argument, "'replace' must be newer or always");
  const std::string& from = p.source;
  struct Item {
    std::string op;
    DType dtype;
    Json value;
  };
  std::vector<Item> fresh;
  Json imported = Json::array(), unchanged = Json::array(), kept = Json::array();
  for (std::size_t i = 0; i < records.size(); ++i) {
    const Json& r = records[i];
    const std::string where = "calibration " + std::to_string(i);
    if (!r.is_object() || !r.contains("op") || !r["op"].is_string() || !r.contains("dtype") ||
        !r["dtype"].is_string() || !r.contains("envelope") || !r["envelope"].is_number())
      return make_error(ErrorCode::invalid_argument,
                        where + ": needs string 'op' and 'dtype' and a number 'envelope'");
    const std::string op = r["op"].get<std::string>(), dt = r["dtype"].get<std::string>();
    auto dtype = parse_dtype(dt);
    if (!dtype) return make_error(ErrorCode::invalid_argument, where + ": unknown dtype '" + dt + "'");
    const double env = r["envelope"].get<double>();
    if (!std::isfinite(env) || env <= 0)
      return make_error(ErrorCode::invalid_argument,
                        where + " (" + op + "/" + dt + "): the envelope must be finite and positive");
    const std::string name = op + "/" + dt;
    GPUEMU_TRY(auto held, store.get_calibration(op, dt));
    if (held && content_of(*held) == content_of(r)) {
      unchanged.push_back(name);
      continue;
    }
    if (held && replace == "newer" &&
        held->value("calibrated_ms", std::int64_t{0}) > r.value("calibrated_ms", std::int64_t{0})) {
      kept.push_back(name);
      continue;
    }
    Json value = r;
    value.erase("op");
    value.erase("dtype");
    value["imported_ms"] = now_ms();
    if (!from.empty()) value["imported_from"] = from;
    fresh.push_back({op, *dtype, std::move(value)});
    imported.push_back(name);
  }
  for (const Item& it : fresh)
    GPUEMU_TRY_STATUS(store.put_calibration(it.op, std::string(dtype_name(it.dtype)), it.value));
  {
    std::unique_lock lock(ctx.engine_mutex);
    for (const Item& it : fresh)
      ctx.engine.envelopes().set(it.op, it.dtype, it.value["envelope"].get<double>(), it.value);
  }
  wire::CalibrationsReply r;
  r.imported = std::move(imported);
  r.unchanged = std::move(unchanged);
  r.kept_newer = std::move(kept);
  return r;
}

Result<wire::CalibrationsReply> calibrations(DaemonContext& ctx,
                                             const wire::CalibrationsRequest& p) {
  GPUEMU_TRY(Store * store, store_of(ctx));
  const std::string& action = p.action;
  if (action == "list" || action == "export") {
    GPUEMU_TRY(auto list, store->list_calibrations());
    const std::string& op = p.op;
    wire::CalibrationsReply r;
    r.calibrations = Json::array();
    for (auto& c : list)
      if (op.empty() || c.value("op", "") == op) r.calibrations.push_back(std::move(c));
    r.count = r.calibrations.size();
    return r;
  }
  if (action == "import") return import_calibrations(ctx, *store, p);
  return make_error(ErrorCode::invalid_argument,
                    "calibrations action '" + action + "' is not one of list, export, import");
}

Json outbox_status(DaemonContext& ctx, Store& store) {
  if (ctx.pusher) return ctx.pusher->status();
  Json j = {{"to", nullptr}};
  if (auto s = store.outbox_stats()) {
    j["pending"] = s->pending;
    j["rejected"] = s->rejected;
    j["oldest_pending_ms"] = s->oldest_ms;
  }
  return j;
}

Result<wire::OutboxReply> outbox(DaemonContext& ctx, const wire::OutboxRequest& p) {
  GPUEMU_TRY(Store * store, store_of(ctx));
  const std::string& action = p.action;
  wire::OutboxReply r;
  if (action == "status") {
    r.status_fields = outbox_status(ctx, *store);
    return r;
  }
  if (action == "rejected") {
    GPUEMU_TRY(auto items, store->outbox_rejected(p.limit));
    r.rejected = Json::array();
    for (const auto& i : items)
      r.rejected.push_back({{"kind", i.kind == 'f' ? "failure" : "run"},
                            {"id", i.id},
                            {"queued_ms", i.queued_ms},
                            {"why", i.rejected}});
    return r;
  }
  if (!ctx.pusher)
    return make_error(ErrorCode::invalid_argument,
                      "this daemon pushes nowhere: start it with --push-to ADDRESS "
                      "(or $GPUEMU_PUSH_TO) to queue and push its failures and runs");
  if (action == "backlog") {
    FailureQuery q;
    q.op = p.op;
    q.since_ms = p.since_ms;
    GPUEMU_TRY(std::size_t n, store->outbox_enqueue_stored(q, p.runs));
    ctx.pusher->wake();
    r.queued = n;
    r.status = outbox_status(ctx, *store);
    return r;
  }
  if (action == "retry") {
    GPUEMU_TRY(std::size_t n, store->outbox_retry_rejected());
    ctx.pusher->wake();
    r.requeued = n;
    r.status = outbox_status(ctx, *store);
    return r;
  }
  if (action == "wait") {
    // Until nothing is pending (what this daemon stored has reached the central daemon), or the
    // timeout: {"drained": bool} with the status.
    const double timeout_s = p.timeout_s;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
    ctx.pusher->wake();
    for (;;) {
      GPUEMU_TRY(OutboxStats s, store->outbox_stats());
      const bool drained = s.pending == 0;
      if (drained || std::chrono::steady_clock::now() >= deadline || ctx.stopping.load()) {
        r.drained = drained;
        r.status = outbox_status(ctx, *store);
        return r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return make_error(ErrorCode::invalid_argument,
                    "outbox action '" + action + "' is not one of status, backlog, retry, rejected, wait");
}

}  // namespace

void add_scale_handlers(HandlerTable& out) {
  out["calibrations"] = typed(calibrations);
  out["outbox"] = typed(outbox);
}

}  // namespace gpuemu::server
