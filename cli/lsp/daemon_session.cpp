#include "lsp/daemon_session.hpp"

namespace gpuemu::lsp {

DaemonSession::DaemonSession(std::string home, std::string daemon_path)
    : m_home(std::move(home)), m_daemon_path(std::move(daemon_path)) {}

Result<std::shared_ptr<DaemonClient>> DaemonSession::client(bool autostart) {
  std::lock_guard lock(m_mutex);
  if (m_client) return m_client;
  ClientOptions o;
  o.home = m_home;
  o.autostart = autostart;
  o.daemon_path = m_daemon_path;
  GPUEMU_TRY(auto c, DaemonClient::connect(o));
  m_client = std::shared_ptr<DaemonClient>(std::move(c));
  return m_client;
}

Result<Json> DaemonSession::call(const std::string& method, Json params, bool autostart,
                                 std::optional<std::chrono::milliseconds> timeout) {
  GPUEMU_TRY(auto c, client(autostart));
  auto r = c->call_json(method, std::move(params), timeout);
  if (!r && (r.error().code == ErrorCode::unavailable || r.error().code == ErrorCode::timeout)) {
    std::lock_guard lock(m_mutex);
    if (m_client == c) m_client.reset();
  }
  return r;
}

Json DaemonSession::hello() const {
  std::lock_guard lock(m_mutex);
  return m_client ? m_client->hello() : Json::object();
}

void DaemonSession::disconnect() {
  std::lock_guard lock(m_mutex);
  m_client.reset();
}

}  // namespace gpuemu::lsp
