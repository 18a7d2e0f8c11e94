// The server's loop, threads, and the daemon watch (lsp_server.hpp). The methods: lsp_methods.cpp.
#include "lsp/lsp_server.hpp"

#include <chrono>
#include <iostream>

namespace gpuemu::lsp {

LspServer::LspServer(JsonRpcTransport& transport, ServerOptions options)
    : m_transport(transport), m_options(std::move(options)) {
  m_actions.python = m_options.python;
}

LspServer::~LspServer() {
  m_stop = true;
  m_jobs_cv.notify_all();
  if (m_worker.joinable()) m_worker.join();
  if (m_poller.joinable()) m_poller.join();
}

int LspServer::run() {
  m_worker = std::thread([this] { worker_loop(); });
  for (;;) {
    auto msg = m_transport.read();
    if (!msg) {
      m_transport.send({{"jsonrpc", "2.0"},
                        {"id", nullptr},
                        {"error", {{"code", k_parse_error}, {"message", msg.error().message}}}});
      if (msg.error().message.find("ended") != std::string::npos) break;
      continue;
    }
    if (!*msg) break;  // the end of the input
    const Json& m = **msg;
    if (m.is_object() && m.value("method", "") == "exit") break;
    dispatch(m);
  }
  m_stop = true;
  m_jobs_cv.notify_all();
  return m_shutdown ? 0 : 1;
}

void LspServer::dispatch(const Json& m) {
  if (!m.is_object()) {
    m_transport.reply_error(nullptr, k_invalid_request, "a message must be a JSON object");
    return;
  }
  if (!m.contains("method")) return;  // a reply to one of our requests (showDocument): ignored
  if (!m["method"].is_string()) {
    m_transport.reply_error(m.value("id", Json()), k_invalid_request, "'method' must be a string");
    return;
  }
  const std::string method = m["method"].get<std::string>();
  const Json params = m.value("params", Json::object());
  try {
    if (m.contains("id"))
      handle_request(method, m["id"], params);
    else
      handle_notification(method, params);
  } catch (const std::exception& e) {  // a bug must not take the server down
    if (m.contains("id")) m_transport.reply_error(m["id"], k_internal_error, e.what());
    std::cerr << "gpuemu lsp: " << method << ": " << e.what() << "\n";
  }
}

void LspServer::reply_result(const Json& id, const Result<Json>& r) {
  if (r) {
    m_transport.reply(id, *r);
    return;
  }
  const ErrorCode code = r.error().code;
  m_transport.reply_error(id,
                          code == ErrorCode::invalid_argument ? k_invalid_params : k_request_failed,
                          r.error().message);
}

void LspServer::post(std::function<void()> job) {
  {
    std::lock_guard lock(m_jobs_mutex);
    m_jobs.push_back(std::move(job));
  }
  m_jobs_cv.notify_one();
}

void LspServer::worker_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(m_jobs_mutex);
      m_jobs_cv.wait(lock, [this] { return m_stop || !m_jobs.empty(); });
      if (m_stop) return;
      job = std::move(m_jobs.front());
      m_jobs.pop_front();
    }
    try {
      job();
    } catch (const std::exception& e) {
      std::cerr << "gpuemu lsp: worker: " << e.what() << "\n";
    }
  }
}

void LspServer::send_daemon_status(bool running, const Json& ping) {
  Json status = {{"running", running}, {"home", m_daemon->home()}};
  if (running) {
    const Json hello = m_daemon->hello();
    status["pid"] = hello.value("pid", Json());
    status["version"] = hello.value("version", Json());
    status["socket"] = hello.value("socket", Json());
    status["home"] = hello.value("home", m_daemon->home());
    status["uptime_s"] = ping.value("uptime_s", Json());
    std::lock_guard lock(m_state);
    std::size_t n = 0;
    for (const auto& g : m_raw_groups) n += g.failures.size();
    status["current_failures"] = n;
  }
  m_transport.notify("gpuemu/daemonStatus", status);
}

void LspServer::poll_loop() {
  while (!m_stop) {
    auto ping = m_daemon->call(wire::PingRequest{}, false, std::chrono::seconds(5));
    const bool running = ping.ok();
    std::string seen;
    if (running)
      seen = ping->value("started_ms", Json()).dump() + "/" + ping->value("changes", Json()).dump();
    bool changed = false;
    {
      std::lock_guard lock(m_state);
      changed = running && seen != m_last_seen;
    }
    if (changed && refresh(false)) {
      {
        std::lock_guard lock(m_state);
        m_last_seen = seen;
      }
      publish();
      m_transport.notify("gpuemu/failuresChanged", Json::object());
    }
    int last = 0;
    {
      std::lock_guard lock(m_state);
      last = m_last_running;
      m_last_running = running ? 1 : 0;
    }
    if (last != (running ? 1 : 0) || changed) send_daemon_status(running, running ? *ping : Json());
    for (int waited = 0; waited < m_options.poll_ms && !m_stop; waited += 20)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool LspServer::refresh(bool autostart) {
  auto failures = m_daemon->call(wire::failures_list(), autostart);
  if (!failures) return false;
  auto runs = m_daemon->call(wire::RunsRequest{"", 5000}, autostart);
  if (!runs) return false;
  std::vector<FailureGroup> groups = current_failure_groups(
      failures->value("failures", Json::array()), runs->value("runs", Json::array()));
  std::lock_guard lock(m_state);
  m_raw_groups = std::move(groups);
  m_runs = runs->value("runs", Json::array());
  return true;
}

OpCatalogue LspServer::catalogue() {
  {
    std::lock_guard lock(m_state);
    if (m_catalogue) return *m_catalogue;
  }
  auto ops = m_daemon->call(wire::ListOpsRequest{}, false, std::chrono::seconds(10));
  if (!ops) return OpCatalogue{};
  OpCatalogue c = catalogue_from(*ops);
  std::lock_guard lock(m_state);
  m_catalogue = c;
  return c;
}

void LspServer::publish() {
  std::lock_guard serial(m_publish);
  std::vector<FailureGroup> raw;
  {
    std::lock_guard lock(m_state);
    raw = m_raw_groups;
  }
  std::vector<PlacedGroup> placed = place_groups(std::move(raw), m_workspace);
  std::map<std::string, std::vector<Diagnostic>> by_path = failure_diagnostics(placed);
  const std::string config = m_workspace.config_path();
  if (!config.empty()) {
    auto toml = toml_diagnostics(m_workspace.text(config), config, catalogue());
    auto& list = by_path[config];
    list.insert(list.begin(), toml.begin(), toml.end());
  }
  std::set<std::string> now;
  for (const auto& [path, diags] : by_path) {
    Json arr = Json::array();
    for (const auto& d : diags) arr.push_back(to_json(d));
    m_transport.notify("textDocument/publishDiagnostics",
                       {{"uri", path_to_uri(path)}, {"diagnostics", arr}});
    now.insert(path);
  }
  std::lock_guard lock(m_state);
  for (const auto& old : m_published)
    if (!now.count(old))
      m_transport.notify("textDocument/publishDiagnostics",
                         {{"uri", path_to_uri(old)}, {"diagnostics", Json::array()}});
  m_published = std::move(now);
  m_groups = std::move(placed);
}

}  // namespace gpuemu::lsp
