#include "pusher.hpp"

#include "gpuemu/protocol/client.hpp"
#include "gpuemu/protocol/wire/failures.hpp"
#include "gpuemu/protocol/wire/scale.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>

namespace gpuemu::server {

namespace {

// A push's header stops growing past this (a frame's header may hold 16 MiB of JSON; one record's
// meta is a few KiB, its error map included).
constexpr std::size_t k_batch_json_bytes = std::size_t{8} << 20;

// Errors the central daemon gives for what it will never take (a record it cannot read, an id it
// holds with other content, an op it does not know): the entry is set aside, not retried. Anything
// else (no answer, a timeout, a daemon shutting down or out of space) is retried with back-off.
bool refused_for_good(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
    case ErrorCode::unknown_op:
    case ErrorCode::schema_error:
    case ErrorCode::shape_mismatch:
    case ErrorCode::conflict:
      return true;
    default:
      return false;
  }
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Pusher::Pusher(DaemonContext& ctx, PushConfig config) : m_ctx(ctx), m_config(std::move(config)) {
  m_origin = {{"host", host_name()},
              {"home", ctx.paths.home},
              {"pid", static_cast<long>(getpid())},
              {"gpuemu_version", GPUEMU_VERSION}};
}

Pusher::~Pusher() { stop(); }

void Pusher::start() {
  if (m_thread.joinable()) return;
  m_thread = std::thread([this] { run(); });
}

void Pusher::stop() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_cv.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void Pusher::wake() {
  {
    std::lock_guard lock(m_mutex);
    m_woken = true;
    m_next_attempt_ms = 0;
    m_backoff = std::chrono::milliseconds(0);
  }
  m_cv.notify_all();
}

Json Pusher::status() const {
  Json j = {{"to", m_config.to}, {"origin", m_origin}};
  if (m_ctx.store)
    if (auto s = m_ctx.store->outbox_stats()) {
      j["pending"] = s->pending;
      j["rejected"] = s->rejected;
      j["oldest_pending_ms"] = s->oldest_ms;
    }
  std::lock_guard lock(m_mutex);
  j["pushed_failures"] = m_pushed_failures;
  j["pushed_runs"] = m_pushed_runs;
  j["already_present"] = m_present;
  j["batches"] = m_batches;
  j["rejected_since_start"] = m_rejected;
  j["last_ok_ms"] = m_last_ok_ms;
  j["last_batch_s"] = m_last_batch_s;
  j["last_error"] = m_last_error;
  j["last_error_ms"] = m_last_error_ms;
  j["next_attempt_ms"] = m_next_attempt_ms;
  j["backoff_ms"] = m_backoff.count();
  j["calibrations"] = {{"sync_s", m_config.calibration_sync.count()},
                       {"last_sync_ms", m_calibration_sync_ms},
                       {"applied", m_calibrations_applied},
                       {"last_error", m_calibration_error}};
  return j;
}

Result<DaemonClient*> Pusher::client() {
  if (!m_client) {
    ClientOptions o;
    o.url = m_config.to;
    o.autostart = false;
    o.timeout = m_config.timeout;
    o.token = m_config.token;
    o.tls_ca = m_config.tls_ca;
    GPUEMU_TRY(m_client, DaemonClient::connect(o));
    spdlog::info("[push] connected to {}", m_config.to);
  }
  return m_client.get();
}

void Pusher::failed(const Error& e) {
  m_client.reset();  // a fresh connection for the next try
  std::lock_guard lock(m_mutex);
  m_backoff = std::min(m_config.retry_max,
                       std::max(std::chrono::milliseconds(250), m_backoff * 2));
  m_last_error = e.message;
  m_last_error_ms = now_ms();
  m_next_attempt_ms = m_last_error_ms + m_backoff.count();
  spdlog::warn("[W-push] {} (retrying in {} ms)", e.message, m_backoff.count());
}

Result<bool> Pusher::push_batch() {
  Store& store = *m_ctx.store;
  GPUEMU_TRY(auto items, store.outbox_peek(m_config.batch));
  if (items.empty()) return false;
  // The request: failures as exported records whose snapshots travel as uint8 tensors, runs as
  // stored. Entries whose record is gone (deleted here) are dropped from the outbox.
  protocol::Frame req = protocol::make_request(std::string(wire::PushRequest::k_method));
  Json records = Json::array(), runs = Json::array();
  std::vector<std::string> sent, gone;
  std::vector<const OutboxItem*> sent_items;
  bool set_aside = false;
  std::size_t bytes = 0, json_bytes = 0;  // snapshots; the header's JSON (at most 16 MiB a frame)
  for (const OutboxItem& item : items) {
    if (!sent.empty() && (bytes >= m_config.batch_bytes || json_bytes >= k_batch_json_bytes)) break;
    if (item.kind == 'f') {
      auto rec = store.get_failure(item.id);
      if (!rec) {
        if (rec.error().code != ErrorCode::not_found) return rec.error();
        gone.push_back(item.key);
        continue;
      }
      if (rec->inputs.size() > m_config.max_record_bytes) {
        const std::string why =
            "its snapshot is " + std::to_string(rec->inputs.size() >> 20) +
            " MiB, over --push-max-record-mb " + std::to_string(m_config.max_record_bytes >> 20) +
            " (raise it here and the central daemon's --tcp-max-message-mb, then gpuemu push retry; "
            "or carry it by file: gpuemu failures export / import)";
        spdlog::warn("[W-push] not pushing failure {}: {}", item.id, why);
        GPUEMU_TRY_STATUS(store.outbox_reject(item.key, why));
        set_aside = true;
        std::lock_guard lock(m_mutex);
        ++m_rejected;
        continue;
      }
      Json m = rec->meta;
      m["id"] = rec->id;
      m["op"] = rec->op;
      m["created_ms"] = rec->created_ms;
      const std::string name = "snapshots/" + std::to_string(records.size());
      m["snapshot_tensor"] = name;
      const auto n = static_cast<std::int64_t>(rec->inputs.size());
      bytes += rec->inputs.size();
      GPUEMU_TRY(Tensor t, Tensor::view(DType::uint8, {n}, {1}, 0,
                                        std::make_shared<std::vector<std::byte>>(std::move(rec->inputs))));
      req.add(name, std::move(t));
      json_bytes += m.dump().size();
      records.push_back(std::move(m));
    } else {
      GPUEMU_TRY(auto run, store.get_run(item.started_ms, item.id));
      if (!run) {
        gone.push_back(item.key);
        continue;
      }
      json_bytes += run->dump().size();
      runs.push_back(std::move(*run));
    }
    sent.push_back(item.key);
    sent_items.push_back(&item);
  }
  if (!gone.empty()) GPUEMU_TRY_STATUS(store.outbox_done(gone));
  if (sent.empty()) return !gone.empty() || set_aside;  // the outbox may hold more
  req.header["params"] = to_json(wire::PushRequest{records, runs, m_origin});
  GPUEMU_TRY(DaemonClient * c, client());
  const auto t0 = std::chrono::steady_clock::now();
  auto reply = c->call(std::move(req));
  if (!reply) return reply.error();  // the transport: retried
  auto result = protocol::reply_result(*reply);
  if (!result) {
    if (!refused_for_good(result.error().code)) return result.error();
    if (sent.size() == 1) {
      // This one record is what the central daemon refuses: set it aside, go on with the rest.
      spdlog::warn("[W-push] {} refused {} {}: {}", m_config.to,
                   sent_items[0]->kind == 'f' ? "failure" : "run", sent_items[0]->id,
                   result.error().message);
      GPUEMU_TRY_STATUS(store.outbox_reject(sent[0], result.error().message));
      std::lock_guard lock(m_mutex);
      ++m_rejected;
      return true;
    }
    // A batch is taken whole or not at all: find the refused record by pushing one at a time.
    const std::size_t saved = m_config.batch;
    m_config.batch = 1;
    Result<bool> one = true;
    for (std::size_t i = 0; i < sent.size() && one; ++i) one = push_batch();
    m_config.batch = saved;
    if (!one) return one.error();
    return true;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GPUEMU_TRY_STATUS(store.outbox_done(sent));
  std::lock_guard lock(m_mutex);
  ++m_batches;
  m_last_ok_ms = now_ms();
  m_last_batch_s = took;
  const Json f = result->value("failures", Json::object()), r = result->value("runs", Json::object());
  m_pushed_failures += static_cast<std::int64_t>(f.value("imported", Json::array()).size());
  m_pushed_runs += static_cast<std::int64_t>(r.value("imported", Json::array()).size());
  m_present += static_cast<std::int64_t>(f.value("present", Json::array()).size() +
                                         r.value("present", Json::array()).size());
  m_backoff = std::chrono::milliseconds(0);
  m_last_error.clear();
  return true;
}

// The central daemon's calibrations become this daemon's (stored and applied): every runner then
// judges with the same envelopes. A calibration only this daemon has stays.
Status Pusher::sync_calibrations() {
  GPUEMU_TRY(DaemonClient * c, client());
  GPUEMU_TRY(Json result, c->request(wire::calibrations_request("list")));
  std::int64_t applied = 0;
  for (const Json& cal : result.value("calibrations", Json::array())) {
    const std::string op = cal.value("op", ""), dt = cal.value("dtype", "");
    auto dtype = parse_dtype(dt);
    if (op.empty() || !dtype || !cal.contains("envelope") || !cal["envelope"].is_number()) continue;
    Json mine = cal;
    mine["synced_from"] = m_config.to;
    GPUEMU_TRY(auto held, m_ctx.store->get_calibration(op, dt));
    if (held) {
      Json a = *held, b = mine;
      for (Json* x : {&a, &b})
        for (const char* k : {"synced_ms", "op", "dtype"}) x->erase(k);
      if (a == b) continue;
    }
    mine["synced_ms"] = now_ms();
    mine.erase("op");
    mine.erase("dtype");
    GPUEMU_TRY_STATUS(m_ctx.store->put_calibration(op, dt, mine));
    {
      std::unique_lock lock(m_ctx.engine_mutex);
      m_ctx.engine.envelopes().set(op, *dtype, mine["envelope"].get<double>(), mine);
    }
    ++applied;
  }
  if (applied > 0) spdlog::info("[push] applied {} calibrations from {}", applied, m_config.to);
  std::lock_guard lock(m_mutex);
  m_calibrations_applied += applied;
  m_calibration_sync_ms = now_ms();
  m_calibration_error.clear();
  return {};
}

void Pusher::run() {
  spdlog::info("[push] pushing failures and runs to {}", m_config.to);
  std::uint64_t seen = ~std::uint64_t{0};  // the store's changes() when the outbox was last empty
  bool more = false;  // the last push took a batch: the outbox may hold more
  std::int64_t next_sync_ms = 0;
  for (;;) {
    {
      std::unique_lock lock(m_mutex);
      if (m_stop) return;
    }
    const std::int64_t now = now_ms();
    bool due, retrying;
    {
      std::lock_guard lock(m_mutex);
      due = now >= m_next_attempt_ms;
      retrying = m_next_attempt_ms != 0;
    }
    if (due && m_config.calibration_sync.count() > 0 && now >= next_sync_ms) {
      if (auto st = sync_calibrations(); !st) {
        std::lock_guard lock(m_mutex);
        m_calibration_error = st.error().message;
        next_sync_ms = now + std::min<std::int64_t>(m_config.calibration_sync.count() * 1000, 30000);
      } else {
        next_sync_ms = now + m_config.calibration_sync.count() * 1000;
      }
    }
    const std::uint64_t changes = m_ctx.store->changes();
    bool woken;
    {
      std::lock_guard lock(m_mutex);
      woken = m_woken;
      m_woken = false;
    }
    if (due && (changes != seen || woken || retrying || more)) {
      auto pushed = push_batch();
      more = false;
      if (!pushed) {
        failed(pushed.error());
      } else {
        {
          std::lock_guard lock(m_mutex);
          m_next_attempt_ms = 0;
        }
        more = *pushed;
        if (more) continue;
        seen = changes;
      }
    }
    std::unique_lock lock(m_mutex);
    m_cv.wait_for(lock, std::chrono::milliseconds(100), [this] { return m_stop || m_woken; });
  }
}

}  // namespace gpuemu::server
