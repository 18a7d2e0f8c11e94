// DaemonClient: NNG req over a context per call; autostart of the daemon.
#include "gpuemu/protocol/client.hpp"
#include "gpuemu/protocol/wire/info.hpp"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

namespace gpuemu {
namespace fs = std::filesystem;

namespace {

Error nng_failure(const std::string& what, int rv) {
  const ErrorCode code = rv == NNG_ETIMEDOUT ? ErrorCode::timeout
                         : (rv == NNG_ECONNREFUSED || rv == NNG_ENOENT || rv == NNG_ECLOSED ||
                            rv == NNG_ECONNSHUT || rv == NNG_EADDRINVAL)
                             ? ErrorCode::unavailable
                             : ErrorCode::io_error;
  return make_error(code, what + ": " + nng_strerror(rv));
}

}  // namespace

// The connection's state as NNG's pipe events report it. With no resend (see exchange), req0 fails
// a request whose pipe closes while it waits for the reply (ECONNRESET), but holds a request that
// has no pipe to be sent on until the request's timeout (600 s by default in the Python client): a
// client whose daemon was killed between two requests hung that long. So a request is sent only
// while a pipe is up (or comes up within k_reconnect_grace), and one still waiting to be sent, or
// whose reply can no longer come, is ended once no pipe has been up for that long, or once every
// pipe it could have gone out on is gone.
struct DaemonClient::Impl {
  nng_socket sock = NNG_SOCKET_INITIALIZER;
  std::chrono::milliseconds timeout{0};
  std::string token;
  std::mutex mu;
  std::condition_variable pipe_up;
  std::set<std::uint32_t> live;                             // the ids of the pipes up now
  std::chrono::steady_clock::time_point empty_since{};      // when `live` last became empty
  // Shared memory: this connection's arenas (kept mapped while it lives), the threshold, the
  // size the next reply arena should have (the largest reply's large storages so far).
  shm::ClientSettings shm_settings;
  std::unique_ptr<shm::ArenaPool> pool;
  bool shm_on = false;
  std::string shm_status = "off";
  std::atomic<std::size_t> reply_hint{std::size_t{4} << 20};
  std::atomic<std::uint64_t> sent_bytes{0}, sent_tensors{0}, received_bytes{0},
      received_tensors{0};
  ~Impl() {
    if (nng_socket_id(sock) > 0) nng_close(sock);
  }

  static void on_pipe(nng_pipe p, nng_pipe_ev ev, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    std::lock_guard lock(self->mu);
    const auto id = static_cast<std::uint32_t>(nng_pipe_id(p));
    if (ev == NNG_PIPE_EV_ADD_POST) {
      self->live.insert(id);
      self->pipe_up.notify_all();
    } else if (ev == NNG_PIPE_EV_REM_POST && self->live.erase(id) > 0 && self->live.empty()) {
      self->empty_since = std::chrono::steady_clock::now();
    }
  }
};

DaemonClient::DaemonClient(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
// Closing the socket, bounded: libnng before 1.8 can hang in nng_close while a pipe goes away at
// the same moment (nanomsg/nng#1813; Debian 12 ships 1.5.2), as NngServer::stop bounds the daemon's
// side. A CI run's tcp test hung 600 s after its last assertion, with clients of daemons that had
// just stopped still to be destroyed. Past the bound the Impl is left to the process (NNG may
// still call its pipe callback), and the caller goes on.
DaemonClient::~DaemonClient() {
  if (!m_impl || nng_socket_id(m_impl->sock) <= 0) return;
  auto closed = std::make_shared<std::promise<void>>();
  std::future<void> done = closed->get_future();
  std::thread([sock = m_impl->sock, closed] {
    nng_close(sock);
    closed->set_value();
  }).detach();
  if (done.wait_for(std::chrono::seconds(5)) == std::future_status::ready) {
    m_impl->sock = NNG_SOCKET_INITIALIZER;  // closed: ~Impl has nothing left to do
    return;
  }
  (void)m_impl.release();
}

namespace {

// The TLS settings of a tls+tcp:// dialer: the daemon's certificate must chain to the PEM
// certificates in `ca_file` and name the host of the URL (nng checks both).
Status use_tls(nng_dialer d, const std::string& url, const std::string& ca_file) {
  if (ca_file.empty())
    return make_error(ErrorCode::invalid_argument,
                      "a tls+tcp:// daemon needs the certificate(s) to trust: set $GPUEMU_TLS_CA to "
                      "a PEM file (the daemon's --tls-cert, or the CA that signed it)");
  std::ifstream f(ca_file, std::ios::binary);
  std::ostringstream pem;
  pem << f.rdbuf();
  if (!f || pem.str().find("-----BEGIN ") == std::string::npos)
    return make_error(ErrorCode::invalid_argument,
                      "cannot read PEM certificates from " + ca_file + " ($GPUEMU_TLS_CA)");
  nng_tls_config* cfg = nullptr;
  if (int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT); rv != 0)
    return nng_failure("this libnng has no TLS", rv);
  struct Free {
    nng_tls_config* c;
    ~Free() { nng_tls_config_free(c); }
  } guard{cfg};
  if (int rv = nng_tls_config_ca_chain(cfg, pem.str().c_str(), nullptr); rv != 0)
    return nng_failure("the certificates in " + ca_file + " are not usable", rv);
  nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
  // The name the daemon's certificate must carry: the URL's host.
  std::string host = url.substr(std::string("tls+tcp://").size());
  host = host.substr(0, host.rfind(':'));
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (int rv = nng_tls_config_server_name(cfg, host.c_str()); rv != 0)
    return nng_failure("TLS server name " + host, rv);
  if (int rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg); rv != 0)
    return nng_failure("cannot use TLS on " + url, rv);
  return {};
}

// Opens a req socket and dials `url` synchronously (fails at once when nothing listens).
Result<std::unique_ptr<DaemonClient::Impl>> dial(const std::string& url, const std::string& tls_ca) {
  auto impl = std::make_unique<DaemonClient::Impl>();
  if (int rv = nng_req0_open(&impl->sock); rv != 0) return nng_failure("cannot open a socket", rv);
  nng_socket_set_size(impl->sock, NNG_OPT_RECVMAXSZ, 0);  // no limit: tensors are large
  for (nng_pipe_ev ev : {NNG_PIPE_EV_ADD_POST, NNG_PIPE_EV_REM_POST})
    if (int rv = nng_pipe_notify(impl->sock, ev, &DaemonClient::Impl::on_pipe, impl.get()); rv != 0)
      return nng_failure("cannot watch the connection", rv);
  nng_dialer d;
  if (int rv = nng_dialer_create(&d, impl->sock, url.c_str()); rv != 0)
    return nng_failure("cannot dial " + url, rv);
  if (url.rfind("tls+tcp://", 0) == 0) GPUEMU_TRY_STATUS(use_tls(d, url, tls_ca));
  if (int rv = nng_dialer_start(d, 0); rv != 0) {
    std::string what = "no gpuemu daemon answers on " + url;
    if (url.rfind("tls+tcp://", 0) == 0 && (rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO))
      what = "the daemon at " + url + " failed TLS verification against " + tls_ca +
             " ($GPUEMU_TLS_CA)";
    return nng_failure(what, rv);
  }
  return impl;
}

}  // namespace

namespace {

// One request on its own context: `msg` (owned from here on) out, the reply's message back (the
// caller frees it). `what` names the request in a timeout's message.
// How long a request waits for the connection to the daemon to come (back) up before it is
// refused: the dialer retries every 100 ms or so, so a daemon that is restarting is found again.
constexpr std::chrono::milliseconds k_reconnect_grace{3000};

// "3", "0.5", "600": seconds for a message.
std::string seconds_text(std::chrono::milliseconds t) {
  std::ostringstream os;
  os << static_cast<double>(t.count()) / 1000.0;
  return os.str();
}

// Why a request's connection was lost, for its error ("" for other errors): the daemon went away,
// or, for a large request, dropped it over its size limit (a daemon drops a message over
// --max-message-mb or --tcp-max-message-mb unread and closes the connection, which the client may
// see while still sending or while waiting for the reply).
std::string lost_connection(int rv, std::size_t request_bytes) {
  if (rv != NNG_ECONNRESET && rv != NNG_ECLOSED && rv != NNG_ECONNSHUT) return "";
  if (request_bytes >= (1u << 20))
    return " (the connection was lost: the daemon went away, or dropped the request unread; this "
           "request was " + std::to_string(request_bytes >> 20) +
           " MiB, and a daemon drops a message over its --max-message-mb or --tcp-max-message-mb "
           "limit)";
  return " (the connection was lost: the daemon went away or dropped it)";
}

Result<nng_msg*> exchange(DaemonClient::Impl& impl, nng_msg* msg, std::chrono::milliseconds t,
                          const std::string& what, const std::string& url) {
  const std::size_t request_bytes = nng_msg_len(msg);
  nng_ctx ctx;
  if (int rv = nng_ctx_open(&ctx, impl.sock); rv != 0) {
    nng_msg_free(msg);
    return nng_failure("cannot open a context", rv);
  }
  struct CtxGuard {
    nng_ctx c;
    ~CtxGuard() { nng_ctx_close(c); }
  } guard{ctx};
  // One request is never re-sent: a fuzz run may take minutes, and re-sending would run it twice.
  nng_ctx_set_ms(ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
  // The aio reports its completion to `done`, so that the wait below can look at the connection
  // every 100 ms meanwhile.
  struct Done {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    static void callback(void* arg) {
      auto* d = static_cast<Done*>(arg);
      std::lock_guard lock(d->m);
      d->done = true;
      d->cv.notify_all();
    }
  } done;
  nng_aio* aio = nullptr;
  if (int rv = nng_aio_alloc(&aio, &Done::callback, &done); rv != 0) {
    nng_msg_free(msg);
    return nng_failure("cannot allocate an aio", rv);
  }
  struct AioGuard {
    nng_aio* a;
    ~AioGuard() { nng_aio_free(a); }  // waits for the callback
  } aguard{aio};
  const auto grace = t.count() > 0 ? std::min(t, k_reconnect_grace) : k_reconnect_grace;
  {
    std::unique_lock lock(impl.mu);
    if (!impl.pipe_up.wait_for(lock, grace, [&] { return !impl.live.empty(); })) {
      nng_msg_free(msg);
      return make_error(ErrorCode::unavailable,
                        "the daemon at " + url + " is not connected (it went away; nothing " +
                            "answered within " + seconds_text(grace) + " s), so '" + what +
                            "' was not sent");
    }
  }
  // Runs one operation of the aio to its end. `lost` (called under impl.mu) says when the
  // connection it needs is gone; the operation is then ended with NNG_ECONNSHUT.
  const auto run = [&](auto start, auto lost) {
    {
      std::lock_guard lock(done.m);
      done.done = false;
    }
    start();
    bool aborted = false;
    std::unique_lock lock(done.m);
    while (!done.cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return done.done; })) {
      if (aborted) continue;
      lock.unlock();
      {
        std::lock_guard pipes(impl.mu);
        aborted = lost();
      }
      if (aborted) nng_aio_abort(aio, NNG_ECONNSHUT);
      lock.lock();
    }
  };
  const auto no_pipe_for_grace = [&] {
    return impl.live.empty() && std::chrono::steady_clock::now() - impl.empty_since >= grace;
  };
  nng_aio_set_timeout(
      aio, t.count() <= 0 ? NNG_DURATION_INFINITE : static_cast<nng_duration>(t.count()));
  nng_aio_set_msg(aio, msg);
  // Sending waits for a pipe: ended when none has been up for the grace.
  run([&] { nng_ctx_send(ctx, aio); }, no_pipe_for_grace);
  if (int rv = nng_aio_result(aio); rv != 0) {
    nng_msg_free(nng_aio_get_msg(aio));
    return nng_failure("cannot send '" + what + "' to the daemon at " + url + lost_connection(rv, request_bytes), rv);
  }
  // The request went out on one of the pipes up now; its reply can come on no other (no resend).
  std::set<std::uint32_t> sent_on;
  {
    std::lock_guard lock(impl.mu);
    sent_on = impl.live;
  }
  run([&] { nng_ctx_recv(ctx, aio); },
      [&] {
        for (auto id : sent_on)
          if (impl.live.count(id) > 0) return false;
        return true;
      });
  if (int rv = nng_aio_result(aio); rv != 0) {
    if (rv == NNG_ETIMEDOUT)
      return make_error(ErrorCode::timeout,
                        "the daemon did not answer '" + what + "' within " + seconds_text(t) + " s");
    return nng_failure("no reply from the daemon at " + url + " to '" + what + "'" +
                           lost_connection(rv, request_bytes),
                       rv);
  }
  return nng_aio_get_msg(aio);
}

struct MsgGuard {
  nng_msg* m;
  ~MsgGuard() { nng_msg_free(m); }
};

}  // namespace

namespace {
std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }

// Requests whose replies never carry tensors: no reply arena is offered.
bool replies_without_tensors(const std::string& method) {
  return method == "hello" || method == "stats" || method == "shutdown" || method == "progress";
}
}  // namespace

Result<protocol::Frame> DaemonClient::call(protocol::Frame request,
                                           std::optional<std::chrono::milliseconds> timeout,
                                           bool keep_shared) {
  if (!m_impl->token.empty() && !request.header.contains("token"))
    request.header["token"] = m_impl->token;
  const std::string method = request.header.value("method", "");
  Impl& impl = *m_impl;
  // Large storages go to an arena of the pool (one copy; the daemon reads floating-point ones
  // where they lie), and an arena is offered for the reply's (docs/protocol.md, "Shared memory").
  std::shared_ptr<shm::Arena> request_arena, reply_arena;
  std::optional<protocol::ShmTarget> target;
  if (impl.shm_on) {
    std::size_t large = 0;
    for (const auto& [key, t] : request.tensors)
      if (t.storage_bytes() >= impl.shm_settings.min_bytes) large += align64(t.storage_bytes());
    if (large > 0) request_arena = impl.pool->acquire(large);
    if (request_arena) {
      target.emplace();
      target->data = request_arena->data();
      target->segment = {static_cast<std::int64_t>(::getpid()), request_arena->fd(),
                         request_arena->size(), 0};
      target->min_bytes = impl.shm_settings.min_bytes;
    }
    if (!replies_without_tensors(method)) reply_arena = impl.pool->acquire(impl.reply_hint.load());
    if (reply_arena)
      request.header["shm_reply"] = {{"pid", ::getpid()},
                                     {"fd", reply_arena->fd()},
                                     {"size", reply_arena->size()},
                                     {"min_bytes", impl.shm_settings.min_bytes}};
  }
  // The frame is written straight into the message NNG sends, and the reply decoded from the
  // message NNG received: each tensor is copied once on either side (evidence/race/history.md).
  nng_msg* msg = nullptr;
  int alloc_rv = 0;
  protocol::encode_to(
      request,
      [&](std::size_t n) -> std::byte* {
        alloc_rv = nng_msg_alloc(&msg, n);
        return alloc_rv == 0 ? static_cast<std::byte*>(nng_msg_body(msg)) : nullptr;
      },
      target ? &*target : nullptr);
  if (alloc_rv != 0) return nng_failure("cannot allocate a message", alloc_rv);
  if (target) {
    impl.sent_bytes += target->used;
    impl.sent_tensors += target->placed;
  }
  for (const auto& [key, t] : request.shared) {
    impl.sent_bytes += t.bytes.size();
    ++impl.sent_tensors;
  }
  auto exchanged = exchange(impl, msg, timeout.value_or(impl.timeout), method, m_url);
  if (!exchanged) {
    // Unanswered (a timeout, a lost daemon): the daemon may still be reading this request's arena
    // (it borrows floating-point storages for the request's length) or may yet write a late reply
    // into the one offered. Neither goes back to the pool for another request.
    if (request_arena) impl.pool->retire(request_arena);
    if (reply_arena) impl.pool->retire(reply_arena);
    for (const auto& [key, t] : request.shared)  // arenas the caller wrote tensors into itself
      if (impl.pool && t.ref.pid == ::getpid()) impl.pool->retire_fd(static_cast<int>(t.ref.fd));
    return exchanged.error();
  }
  nng_msg* reply = *exchanged;
  MsgGuard guard{reply};
  protocol::DecodeOptions options;
  options.keep_shared = keep_shared;
  std::size_t shared_bytes = 0, shared_tensors = 0;
  if (reply_arena)
    options.resolve = [&](const shm::SegmentRef& ref,
                          std::size_t nbytes) -> Result<protocol::SharedBytes> {
      // Only the arena this request offered: a reply names nothing else of ours.
      if (ref.pid != ::getpid() || ref.fd != reply_arena->fd() || ref.size != reply_arena->size() ||
          ref.offset > ref.size || nbytes > ref.size - ref.offset)
        return make_error(ErrorCode::protocol_error,
                          "the reply names shared memory other than the arena offered for it");
      shared_bytes += nbytes;
      ++shared_tensors;
      return protocol::SharedBytes{std::span(reply_arena->data() + ref.offset, nbytes),
                                   reply_arena};
    };
  auto frame = protocol::decode(
      std::span(static_cast<const std::byte*>(nng_msg_body(reply)), nng_msg_len(reply)), options);
  if (frame && impl.shm_on) {
    impl.received_bytes += shared_bytes;
    impl.received_tensors += shared_tensors;
    // The next reply arena holds what this reply's large storages needed.
    std::size_t large = 0;
    for (const auto& [key, t] : frame->tensors)
      if (t.storage_bytes() >= impl.shm_settings.min_bytes) large += align64(t.storage_bytes());
    for (const auto& [key, t] : frame->shared) large += align64(t.bytes.size());
    std::size_t hint = impl.reply_hint.load();
    while (large > hint && !impl.reply_hint.compare_exchange_weak(hint, large)) {
    }
  }
  return frame;
}

bool DaemonClient::shm_enabled() const { return m_impl->shm_on; }
const std::string& DaemonClient::shm_status() const { return m_impl->shm_status; }
std::size_t DaemonClient::shm_min_bytes() const { return m_impl->shm_settings.min_bytes; }

std::shared_ptr<shm::Arena> DaemonClient::shm_arena(std::size_t n) {
  return m_impl->shm_on ? m_impl->pool->acquire(n) : nullptr;
}

DaemonClient::ShmCounters DaemonClient::shm_counters() const {
  ShmCounters c;
  c.sent_bytes = m_impl->sent_bytes;
  c.sent_tensors = m_impl->sent_tensors;
  c.received_bytes = m_impl->received_bytes;
  c.received_tensors = m_impl->received_tensors;
  if (m_impl->pool) {
    c.arenas = m_impl->pool->arenas();
    c.mapped_bytes = m_impl->pool->mapped_bytes();
  }
  return c;
}

Result<std::vector<std::byte>> DaemonClient::call_raw(
    std::span<const std::byte> bytes, std::optional<std::chrono::milliseconds> timeout,
    const std::string& what) {
  nng_msg* msg = nullptr;
  if (int rv = nng_msg_alloc(&msg, bytes.size()); rv != 0)
    return nng_failure("cannot allocate a message", rv);
  std::memcpy(nng_msg_body(msg), bytes.data(), bytes.size());
  GPUEMU_TRY(nng_msg * reply,
             exchange(*m_impl, msg, timeout.value_or(m_impl->timeout), what, m_url));
  MsgGuard guard{reply};
  const auto* body = static_cast<const std::byte*>(nng_msg_body(reply));
  return std::vector<std::byte>(body, body + nng_msg_len(reply));
}

Result<Json> DaemonClient::call_json(const std::string& method, Json params,
                                     std::optional<std::chrono::milliseconds> timeout,
                                     protocol::Frame* reply) {
  GPUEMU_TRY(protocol::Frame f, call(protocol::make_request(method, std::move(params)), timeout));
  auto r = protocol::reply_result(f);
  if (reply) *reply = std::move(f);
  return r;
}

std::string find_daemon_binary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& cand :
         {self.parent_path() / "gpuemu-daemon", self.parent_path() / "bin" / "gpuemu-daemon"})
      if (access(cand.c_str(), X_OK) == 0) return cand.string();
  }
  if (const char* env = std::getenv("GPUEMU_DAEMON"); env && *env && access(env, X_OK) == 0)
    return env;
  if (const char* path = std::getenv("PATH")) {
    std::string p(path);
    std::size_t at = 0;
    while (at <= p.size()) {
      const std::size_t end = std::min(p.find(':', at), p.size());
      const fs::path cand = fs::path(p.substr(at, end - at)) / "gpuemu-daemon";
      if (end > at && access(cand.c_str(), X_OK) == 0) return cand.string();
      at = end + 1;
    }
  }
  return "";
}

// Whether a process holds the home's lock: a daemon serving it, or one going away (asked to stop,
// it no longer answers but still holds the store until its drain and teardown end). False when
// nobody does, or there is no lock file yet.
bool home_locked(const protocol::HomePaths& paths) {
  const int fd = open(paths.lock.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;  // a lock taken here goes with the close
  close(fd);
  return held;
}

Status spawn_daemon(const std::string& daemon_path, const std::string& home) {
  if (daemon_path.empty())
    return make_error(ErrorCode::tool_missing,
                      "no gpuemu daemon is running and gpuemu-daemon was found neither next to "
                      "this program nor on "
                      "PATH (set GPUEMU_DAEMON)");
  const pid_t pid = fork();
  if (pid < 0)
    return make_error(ErrorCode::io_error, std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The daemon detaches itself (double fork); this child only execs it.
    setenv("GPUEMU_HOME", home.c_str(), 1);
    execl(daemon_path.c_str(), daemon_path.c_str(), "--home", home.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);  // the detaching parent exits at once
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return make_error(ErrorCode::tool_missing, "cannot run " + daemon_path);
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return make_error(ErrorCode::unavailable, daemon_path + " exited with status " +
                                                  std::to_string(WEXITSTATUS(status)) + " (see " +
                                                  home + "/logs)");
  return {};
}

Result<std::unique_ptr<DaemonClient>> DaemonClient::connect(ClientOptions options) {
  const protocol::HomePaths paths =
      options.home.empty() ? protocol::home_paths() : protocol::home_paths(options.home);
  std::string url = options.url;
  if (url.empty())
    if (const char* d = std::getenv("GPUEMU_DAEMON");
        d != nullptr && std::string_view(d).find("://") != std::string_view::npos)
      url = d;
  if (url.empty()) url = paths.url;
  std::string token = options.token;
  if (token.empty())
    if (const char* t = std::getenv("GPUEMU_TOKEN")) token = t;
  std::string token_file = options.token_file;
  if (token_file.empty())
    if (const char* t = std::getenv("GPUEMU_TOKEN_FILE")) token_file = t;
  if (token.empty() && !token_file.empty()) {
    std::ifstream in(token_file);
    if (!in || !std::getline(in, token) || token.empty())
      return make_error(ErrorCode::invalid_argument,
                        "cannot read a token from " + token_file +
                            " (its first line is the daemon's token: --token-file, GPUEMU_TOKEN_FILE)");
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  }
  std::string tls_ca = options.tls_ca;
  if (tls_ca.empty())
    if (const char* t = std::getenv("GPUEMU_TLS_CA")) tls_ca = t;
  auto try_once = [&]() -> Result<std::unique_ptr<DaemonClient>> {
    GPUEMU_TRY(auto impl, dial(url, tls_ca));
    impl->timeout = options.timeout;
    impl->token = token;
    std::unique_ptr<DaemonClient> c(new DaemonClient(std::move(impl)));
    c->m_url = url;
    wire::HelloRequest hello;
    hello.client = "gpuemu-cpp";
    hello.protocol = protocol::k_protocol_version;
    protocol::Frame hello_frame = protocol::make_request("hello", to_json(hello));
    // Shared memory is tried on the local socket only: hello carries a probe arena, and the
    // daemon says whether it could map it (an old daemon says nothing: inline).
    Impl& ci = *c->m_impl;
    ci.shm_settings = shm::ClientSettings::from_environment();
    std::shared_ptr<shm::Arena> probe;
    if (url.rfind("ipc://", 0) != 0) {
      ci.shm_status = "off: shared memory is for the local socket";
    } else if (!ci.shm_settings.enabled) {
      ci.shm_status = "off: GPUEMU_SHM=0";
    } else {
      ci.pool = std::make_unique<shm::ArenaPool>(ci.shm_settings.pool_bytes);
      probe = ci.pool->acquire(shm::k_min_arena_bytes);
      if (!probe) ci.shm_status = "off: no memfd here";
      else
        hello_frame.header["shm_probe"] = {
            {"pid", ::getpid()}, {"fd", probe->fd()}, {"size", probe->size()}};
    }
    GPUEMU_TRY(protocol::Frame hello_reply, c->call(std::move(hello_frame), std::chrono::seconds(10)));
    GPUEMU_TRY(c->m_hello, protocol::reply_result(hello_reply));
    if (probe) {
      const Json said = hello_reply.header.value("shm_probe", Json());
      ci.shm_on = said == "ok";
      ci.shm_status = ci.shm_on ? "on"
                      : said.is_string() ? "off: the daemon cannot map this client's arenas: " +
                                               said.get<std::string>()
                                         : "off: the daemon does not take shared memory";
    }
    // A daemon asked to stop answers hello while it drains, and refuses the rest: not one to use.
    if (c->m_hello.value("stopping", false))
      return make_error(ErrorCode::unavailable, "the gpuemu daemon at " + url + " is stopping");
    return c;
  };
  auto first = try_once();
  if (first || !options.autostart || url.rfind("ipc://", 0) != 0 ||
      first.error().code != ErrorCode::unavailable)
    return first;
  const std::string bin = options.daemon_path.empty() ? find_daemon_binary() : options.daemon_path;
  // A daemon going away still holds the home, so one started now would find it taken and exit
  // (CI saw it: an editor's stop, then start, 0.1 s apart). Wait for it to go: its drain is bounded
  // at 30 s and its teardown at 5 s. If it turns out to serve after all, use it.
  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (home_locked(paths)) {
    if (std::chrono::steady_clock::now() >= gone_by)
      return make_error(ErrorCode::unavailable,
                        "no gpuemu daemon answers on " + url + ", and the one holding " + paths.home +
                            " has not gone away within 40 s (see " + paths.logs_dir + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (auto c = try_once()) return c;
  }
  GPUEMU_TRY_STATUS(spawn_daemon(bin, paths.home));
  const auto deadline = std::chrono::steady_clock::now() + options.start_timeout;
  Error last = first.error();
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    auto c = try_once();
    if (c) {
      (*c)->m_started = true;
      return c;
    }
    last = c.error();
  }
  return make_error(ErrorCode::unavailable,
                    "started " + bin + " but it did not answer on " + url + " within " +
                        std::to_string(options.start_timeout.count() / 1000) +
                        " s (last error: " + last.message + "; see " + paths.logs_dir + ")");
}

}  // namespace gpuemu
