// The pusher of a worker daemon (docs/scale.md): hands the failures and run summaries this daemon
// stores to a central daemon (`push`), and keeps this daemon's envelopes the central's
// (`calibrations`). Records wait in the store's outbox, written with them in one transaction; a
// batch leaves the outbox only once the central daemon acknowledged it, so a dropped network, a
// central restart or this daemon's crash delays a record but never loses or duplicates it (the
// central import is idempotent: the same id with the same content is "present").
#pragma once

#include "daemon_context.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace gpuemu {
class DaemonClient;
}

namespace gpuemu::server {

struct PushConfig {
  std::string to;          // tcp://, tls+tcp:// or ipc:// address of the central daemon ("": off)
  std::string token;       // the central daemon's token (tcp)
  std::string tls_ca;      // PEM the central's certificate must chain to (tls+tcp)
  std::size_t batch = 64;  // records per push, at most
  std::size_t batch_bytes = std::size_t{32} << 20;  // snapshot bytes per push, about
  // A failure whose snapshot is larger is set aside (rejected) here rather than sent: the central
  // daemon's transport would drop the message (its --tcp-max-message-mb, default 256) and the
  // queue behind it would wait forever.
  std::size_t max_record_bytes = std::size_t{240} << 20;
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};       // per push
  std::chrono::milliseconds retry_max{std::chrono::seconds(30)};     // longest back-off
  std::chrono::seconds calibration_sync{300};  // 0: never pull the central's calibrations
};

class Pusher {
 public:
  Pusher(DaemonContext& ctx, PushConfig config);
  ~Pusher();
  Pusher(const Pusher&) = delete;
  Pusher& operator=(const Pusher&) = delete;

  void start();
  void stop();
  void wake();                // something may be queued, or a retry is wanted now
  Json status() const;        // what `push status` shows
  const PushConfig& config() const { return m_config; }

 private:
  void run();
  // One push of the outbox's oldest entries; true when the outbox had something to push and the
  // central daemon took it (so another push may follow at once).
  Result<bool> push_batch();
  Status sync_calibrations();
  Result<DaemonClient*> client();
  void failed(const Error& e);

  DaemonContext& m_ctx;
  PushConfig m_config;
  Json m_origin;
  std::unique_ptr<DaemonClient> m_client;
  std::thread m_thread;
  mutable std::mutex m_mutex;  // guards everything below, and the wake-up
  std::condition_variable m_cv;
  bool m_stop = false, m_woken = false;
  std::int64_t m_pushed_failures = 0, m_pushed_runs = 0, m_present = 0, m_batches = 0,
               m_rejected = 0;
  std::int64_t m_last_ok_ms = 0, m_last_error_ms = 0, m_next_attempt_ms = 0;
  std::int64_t m_calibration_sync_ms = 0, m_calibrations_applied = 0;
  std::string m_last_error, m_calibration_error;
  std::chrono::milliseconds m_backoff{0};
  double m_last_batch_s = 0;
};

}  // namespace gpuemu::server
