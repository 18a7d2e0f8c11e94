// The daemon's transport: an NNG rep socket with many contexts, so that requests from many clients
// are in flight at once. Cheap requests (hello, ping, stats, shutdown) are answered on NNG's own
// thread; everything else goes to a pool of worker threads (the oracle is CPU-bound).
#pragma once

#include "daemon_context.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gpuemu::server {

class NngServer {
 public:
  explicit NngServer(DaemonContext& ctx);
  ~NngServer();
  NngServer(const NngServer&) = delete;
  NngServer& operator=(const NngServer&) = delete;

  // Adds a listener. ipc:// sockets are created 0600; tcp:// and tls+tcp:// require
  // ctx.config.token, tls+tcp:// also ctx.config.tls_cert and tls_key.
  Status listen(const std::string& url);
  // Starts the contexts and the workers.
  Status start();
  // Stops taking requests, lets in-flight ones finish (up to `drain`), then closes. False when
  // requests were still running at the deadline: their workers are left detached and the caller
  // should exit the process.
  // The transport's own teardown (nng_close) is bounded too: past k_close_bound it is left to the
  // process exit, and stop is false as well.
  bool stop(std::chrono::milliseconds drain);
  static constexpr std::chrono::seconds k_close_bound{5};

  struct Slot;
  struct Impl;                // the socket and the peers' shared-memory mappings
  void on_event(Slot* slot);  // NNG's aio callback

 private:
  void handle_received(Slot* slot);
  // `request`: the request answered, whose borrowed storages are owned (own_borrowed) once the
  // reply is written and before it is sent.
  void send_reply(Slot* slot, protocol::Frame reply, const protocol::Frame* request = nullptr);
  void own_borrowed(const protocol::Frame& request);
  void worker_loop();

  DaemonContext& m_ctx;
  std::unique_ptr<Impl> m_impl;
  std::vector<std::unique_ptr<Slot>> m_slots;
  std::vector<std::thread> m_workers;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<std::pair<Slot*, protocol::Frame>> m_queue;
  bool m_closing = false;
};

}  // namespace gpuemu::server
