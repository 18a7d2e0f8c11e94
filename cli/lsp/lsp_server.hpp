// `gpuemu lsp`: maps LSP messages onto the editor features (as clangd's ClangdLSPServer maps them
// onto ClangdServer). The transport (json_rpc_transport.hpp) moves messages; the features are
// plain functions of the daemon's replies and the workspace (failure_index, failure_diagnostics,
// failure_actions, op_runner, registered_ops, toml_features). Threads: the reader (run()), a
// poller that watches the daemon (`ping`'s `changes`) and republishes diagnostics when failures
// or runs change, and one worker for what takes long (fuzzing, replays, minimizing), so that
// completion and hover are answered while it works.
#pragma once

#include "lsp/daemon_session.hpp"
#include "lsp/failure_actions.hpp"
#include "lsp/failure_diagnostics.hpp"
#include "lsp/json_rpc_transport.hpp"
#include "lsp/toml_features.hpp"
#include "lsp/workspace.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <thread>

namespace gpuemu::lsp {

struct ServerOptions {
  std::string home;         // GPUEMU_HOME ("" = the environment's); initializationOptions.home wins
  std::string daemon_path;  // gpuemu-daemon to start ("" = next to gpuemu, then PATH)
  std::string python = "python3";  // runs client kernels' repro scripts
  int poll_ms = 1000;              // how often the daemon is asked whether failures changed
};

class LspServer {
 public:
  LspServer(JsonRpcTransport& transport, ServerOptions options);
  ~LspServer();
  // Serves until `exit` or the end of the input; returns the process exit code (0 after a
  // `shutdown` request, 1 otherwise, as LSP says).
  int run();

 private:
  using Handler = std::function<Result<Json>(const Json& params)>;
  void dispatch(const Json& message);
  void handle_request(const std::string& method, const Json& id, const Json& params);
  void handle_notification(const std::string& method, const Json& params);
  void reply_result(const Json& id, const Result<Json>& r);
  void post(std::function<void()> job);  // runs on the worker
  void worker_loop();
  void poll_loop();

  Result<Json> initialize(const Json& params);
  void did_open_or_change(const std::string& path, std::string text);
  void did_save(const std::string& path);
  // Lists failures and runs again; false when the daemon did not answer.
  bool refresh(bool autostart);
  void publish();
  void send_daemon_status(bool running, const Json& ping);
  OpCatalogue catalogue();

  JsonRpcTransport& m_transport;
  ServerOptions m_options;
  Workspace m_workspace;
  std::unique_ptr<DaemonSession> m_daemon;
  ActionOptions m_actions;
  bool m_initialized = false;
  bool m_shutdown = false;
  bool m_show_document = false;  // the client handles window/showDocument

  std::mutex m_publish;  // one publish() at a time (the reader, the poller and the worker call it)
  std::mutex m_state;    // guards what follows
  std::vector<PlacedGroup> m_groups;
  std::vector<FailureGroup> m_raw_groups;
  Json m_runs = Json::array();
  std::optional<OpCatalogue> m_catalogue;
  std::set<std::string> m_published;
  std::string m_last_seen;  // "started_ms/changes" of the last refresh
  int m_last_running = -1;

  std::mutex m_jobs_mutex;
  std::condition_variable m_jobs_cv;
  std::deque<std::function<void()>> m_jobs;
  std::atomic<bool> m_stop{false};
  std::thread m_worker;
  std::thread m_poller;
};

}  // namespace gpuemu::lsp
