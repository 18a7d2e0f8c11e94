// The C++ client of gpuemu-daemon (the protocol of docs/protocol.md over NNG req/rep). The CLI and
// the Python module use it. Calls are thread-safe: each runs on its own NNG context.
//
// When no daemon answers on the socket and `autostart` is on, the client starts one (the
// `gpuemu-daemon` next to this program, else on PATH) and waits for it to answer a ping, as
// watchman's clients do.
#pragma once

#include "gpuemu/protocol/protocol.hpp"
#include "gpuemu/protocol/shm.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace gpuemu {

struct ClientOptions {
  // empty: $GPUEMU_DAEMON when it is an address (holds "://": tcp://host:port, tls+tcp://...;
  // otherwise it names the daemon binary), else the ipc:// socket of $GPUEMU_HOME
  std::string url;
  std::string home;  // empty: $GPUEMU_HOME (or its default)
  bool autostart = true;
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // per call, unless a call says
  std::chrono::milliseconds start_timeout{std::chrono::seconds(20)};
  std::string daemon_path;  // empty: found next to this program, then on PATH
  std::string token;        // for tcp:// daemons ($GPUEMU_TOKEN when empty)
  // the file whose first line is the token, when `token` and $GPUEMU_TOKEN are empty
  // ($GPUEMU_TOKEN_FILE when empty)
  std::string token_file;
  std::string tls_ca;       // PEM certificates a tls+tcp:// daemon must chain to ($GPUEMU_TLS_CA)
};

class DaemonClient {
 public:
  static Result<std::unique_ptr<DaemonClient>> connect(ClientOptions options = {});
  ~DaemonClient();
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  // One request, one reply frame (the reply may be an error reply: see call_json). With shared
  // memory on (shm_enabled), request storages of at least shm_min_bytes go through an arena of
  // this client's pool, and an arena is offered for the reply's; `keep_shared` leaves the reply's
  // shared tensors in that arena (Frame::shared, which holds it) instead of copying them out.
  Result<protocol::Frame> call(protocol::Frame request,
                               std::optional<std::chrono::milliseconds> timeout = {},
                               bool keep_shared = false);
  // One message of raw bytes (any bytes: a debugging and testing aid), its reply's raw bytes.
  Result<std::vector<std::byte>> call_raw(std::span<const std::byte> bytes,
                                          std::optional<std::chrono::milliseconds> timeout = {},
                                          const std::string& what = "request");
  // A request whose reply's result (or error) is returned; `reply` receives the whole frame.
  Result<Json> call_json(const std::string& method, Json params = Json::object(),
                         std::optional<std::chrono::milliseconds> timeout = {},
                         protocol::Frame* reply = nullptr);

  // A typed request (gpuemu/protocol/wire/*.hpp): its method and params from the struct, the
  // reply's result (or error) as call_json returns it.
  template <class Request>
  Result<Json> request(const Request& r, std::optional<std::chrono::milliseconds> timeout = {},
                       protocol::Frame* reply = nullptr) {
    return call_json(std::string(Request::k_method), to_json(r), timeout, reply);
  }

  const Json& hello() const { return m_hello; }  // the daemon's hello: version, capabilities, pid

  // The shared-memory hand-off (docs/protocol.md, "Shared memory"): on when the daemon announced
  // tensors.shm and mapped this process's probe arena at hello; shm_status says why not otherwise.
  bool shm_enabled() const;
  const std::string& shm_status() const;
  std::size_t shm_min_bytes() const;
  // A free arena of at least n bytes from this connection's pool (nullptr: send inline).
  std::shared_ptr<shm::Arena> shm_arena(std::size_t n);
  struct ShmCounters {
    std::uint64_t sent_bytes = 0, sent_tensors = 0;          // request storages through arenas
    std::uint64_t received_bytes = 0, received_tensors = 0;  // reply storages through arenas
    std::uint64_t arenas = 0, mapped_bytes = 0;              // the pool now
  };
  ShmCounters shm_counters() const;
  const std::string& url() const { return m_url; }
  bool started_daemon() const { return m_started; }

  struct Impl;  // the NNG socket (daemon_client.cpp)

 private:
  explicit DaemonClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
  Json m_hello;
  std::string m_url;
  bool m_started = false;
};

// The gpuemu-daemon binary a client would start ("" when none is found).
std::string find_daemon_binary();
// Starts a daemon for `home` in the background (it detaches itself); does not wait.
Status spawn_daemon(const std::string& daemon_path, const std::string& home);

}  // namespace gpuemu
