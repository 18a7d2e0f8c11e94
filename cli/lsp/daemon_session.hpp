// The language server's link to the daemon of the workspace's GPUEMU_HOME. Connects lazily and
// again after the daemon went away; `autostart` calls start a daemon when none answers (the
// user's actions), polls do not (a daemon the user stopped stays stopped).
#pragma once

#include <gpuemu/protocol/client.hpp>
#include <gpuemu/protocol/wire/wire.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace gpuemu::lsp {

using Json = nlohmann::json;

class DaemonSession {
 public:
  // `home`: GPUEMU_HOME ("" = the environment's); `daemon_path`: gpuemu-daemon ("" = next to
  // this program, then PATH).
  DaemonSession(std::string home, std::string daemon_path);

  // One request; the reply's result or its error. Drops the connection when the daemon is gone.
  Result<Json> call(const std::string& method, Json params, bool autostart,
                    std::optional<std::chrono::milliseconds> timeout = {});
  // A typed request (gpuemu/protocol/wire/*.hpp).
  template <class Request>
  Result<Json> call(const Request& r, bool autostart,
                    std::optional<std::chrono::milliseconds> timeout = {}) {
    return call(std::string(Request::k_method), to_json(r), autostart, timeout);
  }
  // The daemon's hello when connected (empty object otherwise).
  Json hello() const;
  const std::string& home() const { return m_home; }
  void disconnect();

 private:
  Result<std::shared_ptr<DaemonClient>> client(bool autostart);

  std::string m_home;
  std::string m_daemon_path;
  mutable std::mutex m_mutex;
  std::shared_ptr<DaemonClient> m_client;
};

}  // namespace gpuemu::lsp
