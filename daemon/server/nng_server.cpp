// NngServer: rep0 contexts, a work queue, token checks on tcp connections.
#include "nng_server.hpp"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <spdlog/spdlog.h>

#include <malloc.h>

#include <cstring>
#include <future>
#include <fstream>
#include <sstream>

#include <unistd.h>
#include <csignal>
#include <optional>

namespace gpuemu::server {

struct NngServer::Impl {
  nng_socket sock = NNG_SOCKET_INITIALIZER;
  bool open = false;
  // The mappings of each local pipe's shared-memory arenas (gpuemu/protocol/shm.hpp), dropped when
  // the pipe closes; a request holds its peer's while it runs.
  std::mutex peers_mu;
  std::map<std::uint32_t, std::shared_ptr<shm::PeerMappings>> peers;
};

struct NngServer::Slot {
  enum class State { receiving, working, sending };
  NngServer* server = nullptr;
  nng_ctx ctx{};
  nng_aio* aio = nullptr;
  State state = State::receiving;
  bool from_tcp = false;
  // The request's offer of an arena for the reply's large tensors (the envelope's shm_reply),
  // mapped and checked before the request ran; the outcome of a hello's shm_probe.
  std::shared_ptr<shm::Mapping> reply_arena;
  shm::SegmentRef reply_ref;
  std::size_t reply_min_bytes = 0;
  Json probe_result;
};

namespace {

void slot_callback(void* arg);

bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

}  // namespace

namespace {
// A pipe closed: its peer's arenas are unmapped (a request still running keeps its own reference
// until it ends). Peers that died without their pipe's news reaching us go too.
void on_pipe_removed(nng_pipe pipe, nng_pipe_ev, void* arg) {
  auto* impl = static_cast<NngServer::Impl*>(arg);
  std::lock_guard lock(impl->peers_mu);
  impl->peers.erase(nng_pipe_id(pipe));
  for (auto it = impl->peers.begin(); it != impl->peers.end();) {
    if (::kill(static_cast<pid_t>(it->second->pid()), 0) != 0 && errno == ESRCH)
      it = impl->peers.erase(it);
    else
      ++it;
  }
}

// The mappings of a local pipe's peer (created on its first request).
std::shared_ptr<shm::PeerMappings> peer_of(NngServer::Impl& impl, nng_pipe pipe) {
  std::uint64_t pid = 0;
  if (nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_PID, &pid) != 0 || pid == 0) return nullptr;
  std::lock_guard lock(impl.peers_mu);
  auto& p = impl.peers[nng_pipe_id(pipe)];
  if (!p || p->pid() != static_cast<std::int64_t>(pid))
    p = std::make_shared<shm::PeerMappings>(static_cast<std::int64_t>(pid));
  return p;
}

// The envelope's {pid, fd, size} (shm_probe, shm_reply): an arena of the peer's.
Result<shm::SegmentRef> envelope_segment(const Json& j, const char* field) {
  if (!j.is_object())
    return make_error(ErrorCode::protocol_error, std::string("'") + field + "' must be an object");
  shm::SegmentRef ref;
  for (const char* f : {"pid", "fd", "size"}) {
    auto it = j.find(f);
    if (it == j.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
      return make_error(ErrorCode::protocol_error,
                        std::string("'") + field + "." + f + "' must be a non-negative integer");
  }
  ref.pid = j["pid"].get<std::int64_t>();
  ref.fd = j["fd"].get<std::int64_t>();
  ref.size = j["size"].get<std::uint64_t>();
  return ref;
}
}  // namespace

NngServer::NngServer(DaemonContext& ctx) : m_ctx(ctx), m_impl(std::make_unique<Impl>()) {
  if (nng_rep0_open(&m_impl->sock) == 0) {
    m_impl->open = true;
    nng_pipe_notify(m_impl->sock, NNG_PIPE_EV_REM_POST, on_pipe_removed, m_impl.get());
    nng_socket_set_size(m_impl->sock, NNG_OPT_RECVMAXSZ,
                        0);  // tensors are large; frames check sizes
  }
}

NngServer::~NngServer() {
  stop(std::chrono::milliseconds(0));
}

namespace {

Result<std::string> read_pem(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::invalid_argument, std::string("cannot read the TLS ") + what + " " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (ss.str().find("-----BEGIN ") == std::string::npos)
    return make_error(ErrorCode::invalid_argument,
                      std::string("the TLS ") + what + " " + path + " is not a PEM file");
  return ss.str();
}

// The listener's TLS identity: --tls-cert (its certificate chain) and --tls-key (its private key).
// Clients are not asked for certificates: the token authenticates them, inside the encryption.
Status use_server_certificate(nng_listener l, const DaemonConfig& config) {
  GPUEMU_TRY(std::string cert, read_pem(config.tls_cert, "certificate"));
  GPUEMU_TRY(std::string key, read_pem(config.tls_key, "key"));
  nng_tls_config* cfg = nullptr;
  if (int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER); rv != 0)
    return make_error(ErrorCode::tool_missing,
                      std::string("this libnng has no TLS: ") + nng_strerror(rv));
  struct Free {
    nng_tls_config* c;
    ~Free() { nng_tls_config_free(c); }
  } guard{cfg};
  if (int rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE); rv != 0)
    return make_error(ErrorCode::internal, std::string("TLS auth mode: ") + nng_strerror(rv));
  if (int rv = nng_tls_config_own_cert(cfg, cert.c_str(), key.c_str(), nullptr); rv != 0)
    return make_error(ErrorCode::invalid_argument,
                      "the TLS certificate " + config.tls_cert + " and key " +
                          config.tls_key + " do not make a usable pair: " + nng_strerror(rv));
  if (int rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg); rv != 0)
    return make_error(ErrorCode::internal, std::string("TLS listener: ") + nng_strerror(rv));
  return {};
}

// nng takes any key with a certificate and fails only at each handshake: a TLS listener is tried
// once, by a handshake of its own (the server signs with its key, the client checks that with the
// certificate's public key), before the daemon says it serves.
Status tls_self_check(nng_listener l, const std::string& url, const DaemonConfig& config) {
  int port = 0;
  if (int rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port); rv != 0)
    return make_error(ErrorCode::internal, std::string("TLS listener port: ") + nng_strerror(rv));
  std::string host = url.substr(std::string("tls+tcp://").size());
  host = host.substr(0, host.rfind(':'));
  if (host.empty() || host == "*" || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "[::]") host = "[::1]";
  const std::string target = "tls+tcp://" + host + ":" + std::to_string(port);
  nng_socket s;
  if (int rv = nng_req0_open(&s); rv != 0)
    return make_error(ErrorCode::internal, std::string("TLS self-check: ") + nng_strerror(rv));
  struct Close {
    nng_socket s;
    ~Close() { nng_close(s); }
  } closer{s};
  nng_tls_config* cfg = nullptr;
  if (int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT); rv != 0)
    return make_error(ErrorCode::internal, std::string("TLS self-check: ") + nng_strerror(rv));
  struct Free {
    nng_tls_config* c;
    ~Free() { nng_tls_config_free(c); }
  } guard{cfg};
  nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);  // the name is the clients' to check
  nng_dialer d;
  int rv = nng_dialer_create(&d, s, target.c_str());
  if (rv == 0) rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
  if (rv == 0) rv = nng_dialer_start(d, 0);
  if (rv != 0)
    return make_error(ErrorCode::invalid_argument,
                      "a TLS handshake with " + url + " failed (" + nng_strerror(rv) +
                          "): is " + config.tls_key + " the private key of " + config.tls_cert + "?");
  return {};
}

std::size_t tensor_bytes(const protocol::Frame& f) {
  std::size_t n = 0;
  for (const auto& [key, t] : f.tensors)  // the daemon's own: not a client's arena
    if (t.storage() && !t.storage()->borrowed()) n += t.storage()->size();
  return n;
}

}  // namespace

Status NngServer::listen(const std::string& url) {
  if (!m_impl->open) return make_error(ErrorCode::internal, "cannot open an NNG rep socket");
  const bool tls = url.rfind("tls+tcp://", 0) == 0;
  const bool tcp = tls || url.rfind("tcp://", 0) == 0;
  if (!tcp && url.rfind("ipc://", 0) != 0)
    return make_error(ErrorCode::invalid_argument,
                      "cannot listen on " + url + ": the daemon listens on ipc://, tcp:// or tls+tcp://");
  if (tcp && m_ctx.config.token.empty())
    return make_error(ErrorCode::invalid_argument,
                      "a tcp:// or tls+tcp:// listener needs a token (--token-file or GPUEMU_TOKEN)");
  if (tls && (m_ctx.config.tls_cert.empty() || m_ctx.config.tls_key.empty()))
    return make_error(ErrorCode::invalid_argument,
                      "a tls+tcp:// listener needs --tls-cert and --tls-key (PEM files)");
  nng_listener l;
  if (int rv = nng_listener_create(&l, m_impl->sock, url.c_str()); rv != 0)
    return make_error(ErrorCode::io_error, "cannot listen on " + url + ": " + nng_strerror(rv));
  if (tls) {
    if (auto st = use_server_certificate(l, m_ctx.config); !st) {
      nng_listener_close(l);
      return st;
    }
  }
  if (tcp && !tls)
    spdlog::warn("[W-cleartext] {} carries the token and the tensors in clear: use tls+tcp:// "
                 "(--tls-cert, --tls-key) or a tunnel off a trusted network", url);
  if (url.rfind("ipc://", 0) == 0) nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600);
  // A tcp peer is not trusted until its token is read, and its token is read only once its whole
  // message is: the transport drops any message over the limit before allocating it.
  // A local client's messages are bounded too (--max-message-mb; default the protocol's own 4 GiB).
  const std::size_t max_bytes =
      tcp ? m_ctx.config.tcp_max_message_bytes : m_ctx.config.max_message_bytes;
  if (int rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, max_bytes); rv != 0)
    return make_error(ErrorCode::internal,
                      std::string("cannot bound the size of messages: ") + nng_strerror(rv));
  if (int rv = nng_listener_start(l, 0); rv != 0)
    return make_error(rv == NNG_EADDRINUSE ? ErrorCode::conflict : ErrorCode::io_error,
                      "cannot listen on " + url + ": " + nng_strerror(rv));
  if (tls) {
    if (auto st = tls_self_check(l, url, m_ctx.config); !st) {
      nng_listener_close(l);
      return st;
    }
  }
  spdlog::info("listening on {}", url);
  return {};
}

Status NngServer::start() {
  const int workers = m_ctx.config.workers > 0
                          ? m_ctx.config.workers
                          : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 0; i < workers; ++i) m_workers.emplace_back([this] { worker_loop(); });
  for (int i = 0; i < std::max(2, m_ctx.config.contexts); ++i) {
    auto slot = std::make_unique<Slot>();
    slot->server = this;
    if (int rv = nng_aio_alloc(&slot->aio, slot_callback, slot.get()); rv != 0)
      return make_error(ErrorCode::internal, std::string("nng_aio_alloc: ") + nng_strerror(rv));
    if (int rv = nng_ctx_open(&slot->ctx, m_impl->sock); rv != 0)
      return make_error(ErrorCode::internal, std::string("nng_ctx_open: ") + nng_strerror(rv));
    m_slots.push_back(std::move(slot));
  }
  for (auto& s : m_slots) nng_ctx_recv(s->ctx, s->aio);
  spdlog::info("serving with {} contexts and {} workers", m_slots.size(), workers);
  return {};
}

namespace {
void slot_callback(void* arg) {
  auto* slot = static_cast<NngServer::Slot*>(arg);
  slot->server->on_event(slot);
}
}  // namespace

void NngServer::on_event(Slot* slot) {
  const int rv = nng_aio_result(slot->aio);
  switch (slot->state) {
    case Slot::State::receiving:
      if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) return;
      if (rv != 0) {
        spdlog::warn("[W-recv] receive failed: {}", nng_strerror(rv));
        nng_ctx_recv(slot->ctx, slot->aio);
        return;
      }
      handle_received(slot);
      return;
    case Slot::State::sending:
      if (rv != 0) {
        nng_msg_free(nng_aio_get_msg(slot->aio));
        if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) return;
        spdlog::warn("[W-send] reply not delivered: {}", nng_strerror(rv));
      }
      slot->state = Slot::State::receiving;
      nng_ctx_recv(slot->ctx, slot->aio);
      return;
    case Slot::State::working:
      return;
  }
}

void NngServer::handle_received(Slot* slot) {
  nng_msg* msg = nng_aio_get_msg(slot->aio);
  slot->reply_arena.reset();
  slot->reply_min_bytes = 0;
  slot->probe_result = Json();
  nng_sockaddr addr{};
  // Fail closed: only a pipe known to be the local socket is local; anything else (tcp, tls+tcp,
  // a pipe whose address cannot be read) is a remote peer, held to the token and the remote rules.
  slot->from_tcp = !(nng_pipe_get_addr(nng_msg_get_pipe(msg), NNG_OPT_REMADDR, &addr) == 0 &&
                     addr.s_family == NNG_AF_IPC);
  const auto bytes =
      std::span(static_cast<const std::byte*>(nng_msg_body(msg)), nng_msg_len(msg));
  auto refuse = [&](const Error& e) {
    ++m_ctx.errors;
    nng_msg_free(msg);
    send_reply(slot, protocol::make_error_reply(e));
  };
  if (!slot->from_tcp) {
    // The local socket is the user's: its directory is 0700 and the socket 0600, and the peer's
    // uid (SO_PEERCRED) is checked too, in case either was opened up.
    std::uint64_t uid = 0;
    if (nng_pipe_get_uint64(nng_msg_get_pipe(msg), NNG_OPT_IPC_PEER_UID, &uid) != 0) {
      spdlog::warn("[W-peer] a request on the local socket whose peer uid is unknown was refused");
      return refuse(make_error(ErrorCode::invalid_argument,
                               "this daemon serves only its own user, and the peer's uid could "
                               "not be read"));
    }
    if (uid != static_cast<std::uint64_t>(geteuid())) {
      spdlog::warn("[W-peer] a request from uid {} on the local socket was refused", uid);
      return refuse(make_error(ErrorCode::invalid_argument,
                               "this daemon serves only its own user (uid " +
                                   std::to_string(geteuid()) + "); the request came from uid " +
                                   std::to_string(uid)));
    }
  }
  if (slot->from_tcp) {
    // The token first: of an unauthenticated message nothing but its header is read.
    auto header = protocol::decode_header(bytes);
    if (!header) {
      spdlog::info("bad frame from a tcp peer: {}", header.error().message);
      return refuse(header.error());
    }
    const auto token = header->find("token");
    if (m_ctx.config.token.empty() || token == header->end() || !token->is_string() ||
        !constant_time_equal(token->get<std::string>(), m_ctx.config.token)) {
      spdlog::warn("[W-token] a tcp request with a missing or wrong token was refused");
      return refuse(make_error(ErrorCode::invalid_argument,
                               "a valid token is required on tcp connections"));
    }
    if (header->value("method", Json()) == "shutdown" && !m_ctx.config.allow_remote_shutdown) {
      spdlog::warn("[W-remote] a tcp client asked for shutdown, which it may not");
      return refuse(make_error(ErrorCode::invalid_argument,
                               "tcp clients may not shut the daemon down unless it was started "
                               "with --allow-remote-shutdown"));
    }
  }
  // Shared memory (docs/protocol.md, "Shared memory"): only a local peer's, only the arenas of the
  // process at the pipe's other end.
  std::shared_ptr<shm::PeerMappings> peer;
  protocol::DecodeOptions decode_options;
  std::shared_ptr<protocol::Copied> shm_in;  // the request's storages in shared memory
  if (!slot->from_tcp) {
    peer = peer_of(*m_impl, nng_msg_get_pipe(msg));
    // --max-message-mb bounds what a local request makes the daemon hold, wherever its bytes
    // travel: the message and its storages in shared memory together.
    const std::size_t limit = m_ctx.config.max_message_bytes;
    auto total = std::make_shared<std::size_t>(bytes.size());
    shm_in = std::make_shared<protocol::Copied>();
    // The request's floating-point storages are read where they lie; what a handler keeps past
    // the request is made the daemon's own before the reply goes (protocol::own_borrowed), after
    // which the client may reuse the arena.
    decode_options.borrow = true;
    if (peer)
      decode_options.resolve = [peer, limit, total, shm_in](const shm::SegmentRef& ref,
                                                    std::size_t nbytes) -> Result<protocol::SharedBytes> {
        *total += nbytes;
        ++shm_in->tensors;
        shm_in->bytes += nbytes;
        if (*total > limit)
          return make_error(ErrorCode::invalid_argument,
                            "the request's message and its tensors in shared memory are over this "
                            "daemon's limit of " + std::to_string(limit >> 20) +
                                " MiB (--max-message-mb): this request was " +
                                std::to_string(*total >> 20) +
                                " MiB (counted up to the tensor that passed the limit)");
        GPUEMU_TRY(auto m, peer->map(ref, nbytes));
        return protocol::SharedBytes{std::span(m->data + ref.offset, nbytes), m};
      };
  }
  auto frame = protocol::decode(bytes, decode_options);
  nng_msg_free(msg);
  if (frame && shm_in && shm_in->tensors > 0) {
    const protocol::Copied b = protocol::borrowed_in(*frame);
    m_ctx.shm_borrowed_tensors += static_cast<std::int64_t>(b.tensors);
    m_ctx.shm_borrowed_bytes += static_cast<std::int64_t>(b.bytes);
    m_ctx.shm_copied_tensors += static_cast<std::int64_t>(shm_in->tensors - b.tensors);
    m_ctx.shm_copied_bytes += static_cast<std::int64_t>(shm_in->bytes - b.bytes);
  }
  if (frame) {
    if (auto probe = frame->header.find("shm_probe"); probe != frame->header.end()) {
      // The client's check that this daemon can map its arenas: answered, never refused.
      auto ref = envelope_segment(*probe, "shm_probe");
      if (ref && !peer) ref = make_error(ErrorCode::protocol_error,
                                         "shared memory is for clients on the local socket");
      Result<std::shared_ptr<shm::Mapping>> m = ref ? peer->map(*ref, 0) : Result<std::shared_ptr<shm::Mapping>>(ref.error());
      slot->probe_result = m ? Json("ok") : Json(m.error().message);
    }
    if (auto offer = frame->header.find("shm_reply"); offer != frame->header.end()) {
      auto ref = envelope_segment(*offer, "shm_reply");
      if (ref && !peer)
        ref = make_error(ErrorCode::protocol_error,
                         "shm_reply: shared memory is for clients on the local socket");
      auto m = ref ? peer->map(*ref, 0) : Result<std::shared_ptr<shm::Mapping>>(ref.error());
      const Json min = offer->is_object() ? offer->value("min_bytes", Json()) : Json();
      if (m && !min.is_null() && (!min.is_number_integer() || min.get<std::int64_t>() < 1))
        m = make_error(ErrorCode::protocol_error, "'shm_reply.min_bytes' must be a positive integer");
      if (!m) {
        frame = make_error(m.error().code, "shm_reply: " + m.error().message);
      } else {
        slot->reply_arena = *m;
        slot->reply_ref = *ref;
        slot->reply_min_bytes =
            min.is_null() ? shm::k_default_min_bytes : min.get<std::size_t>();
      }
    }
  }
  if (!frame) {
    ++m_ctx.errors;
    spdlog::info("bad frame: {}", frame.error().message);
    send_reply(slot, protocol::make_error_reply(frame.error()));
    return;
  }
  const std::string method = frame->header.value("method", "");
  const Command* cmd = find_command(method);
  if (!cmd || cmd->fast) {
    RemoteRequestScope remote(slot->from_tcp);
    send_reply(slot, dispatch(m_ctx, *frame), &*frame);
    return;
  }
  slot->state = Slot::State::working;
  ++m_ctx.in_flight;
  {
    std::lock_guard lock(m_mutex);
    m_queue.emplace_back(slot, std::move(frame).value());
  }
  m_cv.notify_one();
}

// What a handler kept of a request's borrowed storages becomes the daemon's own before the reply
// goes: from then on the client may reuse its arena.
void NngServer::own_borrowed(const protocol::Frame& request) {
  const protocol::Copied c = protocol::own_borrowed(request);
  m_ctx.shm_owned_tensors += static_cast<std::int64_t>(c.tensors);
  m_ctx.shm_owned_bytes += static_cast<std::int64_t>(c.bytes);
}

void NngServer::send_reply(Slot* slot, protocol::Frame reply, const protocol::Frame* request) {
  // The frame is written straight into the message NNG sends (one copy of each tensor), its large
  // tensors into the arena the client offered when it offered one.
  nng_msg* msg = nullptr;
  int alloc_rv = 0;
  if (!slot->probe_result.is_null()) reply.header["shm_probe"] = slot->probe_result;
  std::optional<protocol::ShmTarget> target;
  if (slot->reply_arena) {
    target.emplace();
    target->data = slot->reply_arena->data;
    target->segment = slot->reply_ref;
    target->min_bytes = slot->reply_min_bytes;
  }
  const auto encode = [&](const protocol::Frame& f) {
    protocol::encode_to(
        f,
        [&](std::size_t n) -> std::byte* {
          alloc_rv = nng_msg_alloc(&msg, n);
          return alloc_rv == 0 ? static_cast<std::byte*>(nng_msg_body(msg)) : nullptr;
        },
        target ? &*target : nullptr);
  };
  encode(reply);
  slot->reply_arena.reset();
  // A reply whose JSON is past the protocol's bound would be refused by every client: it becomes
  // an error that says what to ask for instead (the handlers that can grow keep under it).
  if (alloc_rv == 0) {
    const auto* b = static_cast<const std::byte*>(nng_msg_body(msg));
    const std::size_t hlen = std::to_integer<unsigned>(b[4]) | std::to_integer<unsigned>(b[5]) << 8 |
                             std::to_integer<unsigned>(b[6]) << 16 |
                             std::to_integer<unsigned>(b[7]) << 24;
    if (hlen > protocol::k_max_header_bytes) {
      spdlog::error("[E-reply] a reply of {} bytes of JSON exceeds the protocol's limit", hlen);
      nng_msg_free(msg);
      msg = nullptr;
      encode(protocol::make_error_reply(make_error(
          ErrorCode::invalid_argument,
          "the reply would hold " + std::to_string(hlen >> 20) +
              " MiB of JSON, past the protocol's 16 MiB: ask for less (fewer cases or items, a "
              "limit, an op)")));
    }
  }
  // Written: what the reply held of the request's tensors is no longer needed, and what a handler
  // kept of them becomes the daemon's own before the client may reuse its arena.
  reply = {};
  if (request) own_borrowed(*request);
  if (alloc_rv != 0) {
    spdlog::error("[E-alloc] cannot allocate a reply ({})", nng_strerror(alloc_rv));
    slot->state = Slot::State::receiving;
    nng_ctx_recv(slot->ctx, slot->aio);
    return;
  }
  slot->state = Slot::State::sending;
  nng_aio_set_msg(slot->aio, msg);
  nng_ctx_send(slot->ctx, slot->aio);
}

void NngServer::worker_loop() {
  for (;;) {
    std::pair<Slot*, protocol::Frame> job;
    {
      std::unique_lock lock(m_mutex);
      m_cv.wait(lock, [&] { return m_closing || !m_queue.empty(); });
      if (m_queue.empty()) return;
      job = std::move(m_queue.front());
      m_queue.pop_front();
    }
    protocol::Frame reply = [&] {
      RemoteRequestScope remote(job.first->from_tcp);
      return dispatch(m_ctx, job.second);
    }();
    // glibc keeps what a worker thread freed in that thread's arena: after a large request or
    // reply, or a listing of stored failures (each record's metadata is parsed: 15,000 records
    // left the daemon 500 MiB larger, bench/load), the memory is handed back. Not after every
    // chunk of a fuzz run: at 8 MiB, a chunk of 16 float32 softmax cases was "large", and each
    // chunk faulted its pages in again (a fifth of the daemon's time).
    const bool heavy = tensor_bytes(job.second) + tensor_bytes(reply) > (std::size_t{64} << 20) ||
                       job.second.header.value("method", Json()) == "failures";
    send_reply(job.first, std::move(reply), &job.second);
    if (heavy) {
      job.second = {};
      ::malloc_trim(0);
    }
    --m_ctx.in_flight;
  }
}

bool NngServer::stop(std::chrono::milliseconds drain) {
  if (!m_impl->open) return true;
  m_ctx.stopping = true;
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (m_ctx.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const bool clean = m_ctx.in_flight.load() == 0;
  if (!clean)
    spdlog::warn("[W-drain] closing with {} requests still running", m_ctx.in_flight.load());
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the last replies leave
  {
    std::lock_guard lock(m_mutex);
    m_closing = true;
  }
  m_cv.notify_all();
  if (!clean) {
    // Workers still inside a request cannot be interrupted: leave them (and the socket) to the
    // process exit that follows.
    for (auto& t : m_workers) t.detach();
    m_workers.clear();
    m_impl->open = false;
    for (auto& s : m_slots) (void)s.release();  // NNG may still call back into them
    return false;
  }
  // The transport's teardown, bounded: libnng before 1.8 can hang in nng_close while a peer's pipe
  // goes away at the same moment (nanomsg/nng#1813, fixed in 1.8.0 by #1824; Debian 12 ships
  // 1.5.2). It happened on a 2-core CI machine to a daemon whose client closed its socket right
  // after "shutdown": the daemon never exited and its socket kept accepting connections that no
  // one served. Past the bound the process exits without it (the caller's `false` path); every
  // store write was committed before its reply was sent, so nothing stored is lost.
  auto closed = std::make_shared<std::promise<void>>();
  std::future<void> done = closed->get_future();
  std::vector<nng_aio*> aios;
  for (auto& s : m_slots) aios.push_back(s->aio);
  std::thread closer([sock = m_impl->sock, closed, aios] {
    nng_close(sock);
    for (nng_aio* a : aios) nng_aio_stop(a);
    closed->set_value();
  });
  m_impl->open = false;
  if (done.wait_for(k_close_bound) != std::future_status::ready) {
    spdlog::warn("[W-close] the transport did not close within {} s (libnng {}: a known deadlock "
                 "of nng_close before 1.8); exiting without it",
                 std::chrono::duration_cast<std::chrono::seconds>(k_close_bound).count(),
                 nng_version());
    closer.detach();
    {
      std::lock_guard lock(m_mutex);
      m_closing = true;
    }
    m_cv.notify_all();
    for (auto& t : m_workers) t.detach();
    m_workers.clear();
    for (auto& s : m_slots) (void)s.release();  // the closer thread and NNG may still use them
    m_slots.clear();
    return false;
  }
  closer.join();
  for (auto& t : m_workers) t.join();
  m_workers.clear();
  for (auto& s : m_slots) nng_aio_free(s->aio);
  m_slots.clear();
  return true;
}

}  // namespace gpuemu::server
