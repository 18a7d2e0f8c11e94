// What every request handler of the daemon shares: the engine (the validation service), the
// failure store, where the daemon lives, and its counters. Handlers are the protocol layer: they
// turn wire frames into engine calls and results back into frames.
#pragma once

#include "gpuemu/engine/engine.hpp"
#include "gpuemu/engine/fuzz_run.hpp"
#include "gpuemu/protocol/protocol.hpp"
#include "gpuemu/store/store.hpp"
#include "gpuemu/protocol/wire/fields.hpp"
#include "case_cache.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>

namespace gpuemu::server {

// The largest message bound nng 1.5 accepts (NNG_OPT_RECVMAXSZ must stay under 4 GiB): 4095 MiB.
inline constexpr std::size_t k_max_message_mib = 4095;

struct DaemonConfig {
  std::string home;
  std::string token;               // required on tcp:// connections (empty: tcp disabled)
  std::string tcp_url;             // optional second listener: tcp:// or tls+tcp://
  std::string tls_cert, tls_key;   // PEM files of a tls+tcp:// listener's identity
  int workers = 0;                 // 0: max(2, hardware threads)
  int contexts = 32;               // requests in flight at once
  std::string python;              // script kernels' interpreter (empty: the project's venv)
  double script_timeout_s = 60.0;  // per case
  std::int64_t script_memory_mb = 0;  // scripts' RLIMIT_DATA in MiB (0: none; ScriptKernelSpec)
  std::chrono::seconds drain_timeout{30};
  // What a tcp client may do (docs/protocol.md, "Remote clients"): messages over this size are
  // dropped by the transport before anything reads them; scripts (script kernels, script
  // references of custom ops) and shutdown are refused unless the daemon was started to allow them.
  std::size_t tcp_max_message_bytes = std::size_t{256} << 20;
  bool allow_remote_scripts = false;
  bool allow_remote_shutdown = false;
  // What one request may ask of the daemon, whoever sends it (docs/reliability.md, "Limits"); a
  // request over a limit gets an invalid_argument naming the daemon option that raises it.
  std::size_t max_message_bytes = k_max_message_mib << 20;  // local socket (tcp: the above)
  std::int64_t max_batch_cases = 100000;  // cases of one get_test_batch, items of one submit_outputs
  std::int64_t max_case_elements = std::int64_t{1} << 28;  // elements of one case, inputs + outputs
};

// The error of a request over one of the limits above.
inline Error over_limit(const std::string& what, std::int64_t n, std::int64_t limit,
                        const std::string& option) {
  return make_error(ErrorCode::invalid_argument,
                    what + " is " + std::to_string(n) + ", over this daemon's limit of " +
                        std::to_string(limit) + " (gpuemu-daemon " + option + ")");
}

// Whether the request this thread is handling came over tcp (set by the transport around
// dispatch): the handlers that would start a script consult it.
inline thread_local bool t_remote_request = false;
struct RemoteRequestScope {
  explicit RemoteRequestScope(bool remote) : saved(t_remote_request) { t_remote_request = remote; }
  ~RemoteRequestScope() { t_remote_request = saved; }
  RemoteRequestScope(const RemoteRequestScope&) = delete;
  RemoteRequestScope& operator=(const RemoteRequestScope&) = delete;
  bool saved;
};
// An error when a tcp client asks for a script and the daemon does not allow it, else {}.
inline Status remote_script_allowed(const DaemonConfig& config, const std::string& what) {
  if (!t_remote_request || config.allow_remote_scripts) return {};
  return make_error(ErrorCode::invalid_argument,
                    what + " runs a script on the daemon's machine, which tcp clients may not ask "
                           "for unless the daemon was started with --allow-remote-scripts");
}

// Progress of the long requests that carry a `progress_token` (fuzz, calibrate): written by the
// worker running them, read by the fast `progress` request a client polls from another context.
class ProgressBoard {
 public:
  struct Item {
    std::int64_t done = 0, total = 0;
  };
  void set(const std::string& token, std::int64_t done, std::int64_t total) {
    std::lock_guard lock(m_mutex);
    m_items[token] = {done, total};
  }
  void erase(const std::string& token) {
    std::lock_guard lock(m_mutex);
    m_items.erase(token);
  }
  std::optional<Item> get(const std::string& token) const {
    std::lock_guard lock(m_mutex);
    auto it = m_items.find(token);
    return it == m_items.end() ? std::nullopt : std::optional<Item>(it->second);
  }

 private:
  mutable std::mutex m_mutex;
  std::map<std::string, Item> m_items;
};

// A client-side submission whose failures the client diagnoses before they are stored
// (submit_outputs with hold_for_diagnosis): what the daemon judged, kept under an id so that the
// client then sends only its diagnoses (`held_id`), not the chunk's tensors again. Bounded: at most
// k_max entries and k_max_bytes of failing inputs, each for k_ttl; the oldest goes first. A client that finds its id gone submits the
// items again (a daemon that restarted, or a client that took longer than k_ttl to diagnose).
template <class Held>
class HeldBoard {
 public:
  static constexpr std::size_t k_max = 64;
  static constexpr std::size_t k_max_bytes = std::size_t{1} << 30;
  static constexpr std::chrono::minutes k_ttl{10};

  std::string put(Held h, std::size_t bytes) {
    std::lock_guard lock(m_mutex);
    expire_locked();
    while (!m_items.empty() && (m_items.size() >= k_max || m_bytes + bytes > k_max_bytes))
      erase_locked(m_items.begin());
    const std::string id = "held-" + std::to_string(++m_next);
    m_items.emplace(m_next, Entry{id, std::chrono::steady_clock::now(), bytes, std::move(h)});
    m_bytes += bytes;
    return id;
  }
  // Takes the entry out when `check(const Held&)` accepts it (a finished submission is stored
  // once); an entry `check` refuses stays held, and its error is returned. nullopt: no such id.
  template <class Check>
  Result<std::optional<Held>> take(const std::string& id, Check check) {
    std::lock_guard lock(m_mutex);
    expire_locked();
    for (auto it = m_items.begin(); it != m_items.end(); ++it)
      if (it->second.id == id) {
        GPUEMU_TRY_STATUS(check(std::as_const(it->second.held)));
        std::optional<Held> h(std::move(it->second.held));
        erase_locked(it);
        return h;
      }
    return std::optional<Held>();
  }
  std::size_t size() const {
    std::lock_guard lock(m_mutex);
    return m_items.size();
  }

 private:
  struct Entry {
    std::string id;
    std::chrono::steady_clock::time_point at;
    std::size_t bytes = 0;
    Held held;
  };
  using Items = std::map<std::uint64_t, Entry>;
  void erase_locked(typename Items::iterator it) {
    m_bytes -= it->second.bytes;
    m_items.erase(it);
  }
  void expire_locked() {
    const auto now = std::chrono::steady_clock::now();
    while (!m_items.empty() && now - m_items.begin()->second.at > k_ttl) erase_locked(m_items.begin());
  }
  mutable std::mutex m_mutex;
  std::uint64_t m_next = 0;
  std::size_t m_bytes = 0;
  Items m_items;  // by age
};

// What a held submission keeps (handlers_fuzz.cpp fills and finishes it).
struct HeldSubmission {
  std::string op;
  std::string options_key;  // protocol::options_to_json(options).dump() of the judging request
  std::size_t items = 0;
  std::size_t inconclusive = 0;  // items that passed where resolvable, some elements not (a torch op's)
  std::vector<CaseResult> failures;
  std::vector<std::size_t> failure_item;
  std::vector<Json> failure_kernels;
  Json results, by_dtype, coverage;
  Json failed_cases = Json::array();  // [{index, dtype, outputs}] of the failing items (the run record's)
  std::int64_t first_failure = -1, first_index = -1;
  std::optional<std::uint64_t> master_seed;
  std::vector<std::string> used;  // the kept cases judged (case cache keys)
  std::vector<std::pair<std::int64_t, Verdict>> passes;  // (index, verdict) of the passing items
  std::string repro_prefix;  // the client-side run's (empty: "gpuemu fuzz OP")
};

// A client-side run (get_test_batch's `run`): the engine's FuzzRun, fed by every submit_outputs
// naming its id. Lock `mutex` to use it.
struct ClientRun {
  explicit ClientRun(FuzzRequest r) : run(std::move(r)) {}
  std::mutex mutex;
  std::string options_key;  // protocol::options_to_json(options).dump() of the opening request
  // The keys of the options a `next` of this run drew a chunk under (the run's, but for
  // vary_attrs): the submissions of those chunks carry them.
  std::set<std::string> next_keys;
  FuzzRun run;
  bool closed = false;  // done: later submissions are refused
};

// The open client-side runs by id. A run is dropped once done, or 30 minutes after its last use
// (a client that died mid-run), and the oldest goes when 1,024 are open.
class RunBoard {
 public:
  static constexpr std::size_t k_max = 1024;
  static constexpr std::chrono::minutes k_ttl{30};

  std::string open(std::shared_ptr<ClientRun> run) {
    std::lock_guard lock(m_mutex);
    expire_locked();
    if (m_runs.size() >= k_max) {
      auto oldest = m_runs.begin();
      for (auto it = m_runs.begin(); it != m_runs.end(); ++it)
        if (it->second.used < oldest->second.used) oldest = it;
      m_runs.erase(oldest);
    }
    const std::string id = "run-" + std::to_string(++m_next);
    m_runs.emplace(id, Slot{std::chrono::steady_clock::now(), std::move(run)});
    return id;
  }
  std::shared_ptr<ClientRun> find(const std::string& id) {
    std::lock_guard lock(m_mutex);
    expire_locked();
    auto it = m_runs.find(id);
    if (it == m_runs.end()) return nullptr;
    it->second.used = std::chrono::steady_clock::now();
    return it->second.run;
  }
  void close(const std::string& id) {
    std::lock_guard lock(m_mutex);
    m_runs.erase(id);
  }
  std::size_t size() const {
    std::lock_guard lock(m_mutex);
    return m_runs.size();
  }

 private:
  struct Slot {
    std::chrono::steady_clock::time_point used;
    std::shared_ptr<ClientRun> run;
  };
  void expire_locked() {
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(m_runs, [&](const auto& kv) { return now - kv.second.used > k_ttl; });
  }
  mutable std::mutex m_mutex;
  std::uint64_t m_next = 0;
  std::map<std::string, Slot> m_runs;
};

class Pusher;  // pusher.hpp

struct DaemonContext {
  DaemonContext(protocol::HomePaths p, Engine e) : paths(std::move(p)), engine(std::move(e)) {}

  DaemonConfig config;
  protocol::HomePaths paths;
  Engine engine;
  mutable std::shared_mutex engine_mutex;  // exclusive only while envelopes change (calibrate)
  std::unique_ptr<Store> store;
  // Cases handed out by get_test_batch, with their references computed meanwhile (case_cache.hpp);
  // null: none kept, every submission regenerates.
  std::unique_ptr<CaseCache> case_cache;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::int64_t started_ms = 0;
  std::atomic<std::int64_t> requests{0};
  std::atomic<std::int64_t> in_flight{0};
  std::atomic<std::int64_t> errors{0};
  // Request tensors from shared memory (wire::ShmSummary): borrowed, copied while decoding, owned
  // after a handler kept a borrowed one.
  std::atomic<std::int64_t> shm_borrowed_tensors{0}, shm_borrowed_bytes{0}, shm_copied_tensors{0},
      shm_copied_bytes{0}, shm_owned_tensors{0}, shm_owned_bytes{0};
  std::atomic<bool> stopping{false};
  std::function<void()> request_stop;  // set by the transport: starts a graceful shutdown
  ProgressBoard progress;
  HeldBoard<HeldSubmission> held;
  RunBoard runs;
  Pusher* pusher = nullptr;  // set while this daemon pushes to a central one (--push-to)

  double uptime_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
};

// A request handler: the request frame in, a reply frame (or an error) out.
using Handler = std::function<Result<protocol::Frame>(DaemonContext&, const protocol::Frame&)>;

// A method of the registry (gpuemu/protocol/wire/registry.hpp: its name, fast, summary) with its
// handler.
struct Command {
  std::string name;
  Handler handler;
  bool fast = false;  // answered on the transport's thread (never blocks): hello, ping, stats
  std::string summary;
};

// Every method of wire::methods(), in its order, with the handler the handler files registered
// for it (a method without one, or a handler of no method, is a logic_error at the first call).
const std::vector<Command>& commands();
const Command* find_command(std::string_view name);

// Runs one request: finds its command, checks the header, maps any error to an error reply.
protocol::Frame dispatch(DaemonContext& ctx, const protocol::Frame& request);

// Handlers by method name, filled by the handler files (handlers_*.cpp).
using HandlerTable = std::map<std::string, Handler, std::less<>>;
void add_info_handlers(HandlerTable& out);
void add_fuzz_handlers(HandlerTable& out);
void add_failure_handlers(HandlerTable& out);
void add_lint_handlers(HandlerTable& out);
void add_coverage_handlers(HandlerTable& out);
void add_scale_handlers(HandlerTable& out);

// A request's params (an empty object when it has none; dispatch refuses params that are not an
// object).
const Json& request_params(const protocol::Frame& request);

// A handler of a typed method: the params are read into `Request` (a wrong field is an
// invalid_argument naming it) before `fn` runs. `fn` returns the reply struct, or (when the reply
// carries tensors) the whole frame.
template <class Request, class Reply>
Handler typed(Result<Reply> (*fn)(DaemonContext&, const Request&)) {
  return [fn](DaemonContext& ctx, const protocol::Frame& req) -> Result<protocol::Frame> {
    GPUEMU_TRY(Request r, wire::decode<Request>(request_params(req)));
    GPUEMU_TRY(Reply reply, fn(ctx, r));
    return protocol::make_reply(to_json(reply));
  };
}
template <class Request>
Handler typed(Result<protocol::Frame> (*fn)(DaemonContext&, const Request&,
                                            const protocol::Frame&)) {
  return [fn](DaemonContext& ctx, const protocol::Frame& req) -> Result<protocol::Frame> {
    GPUEMU_TRY(Request r, wire::decode<Request>(request_params(req)));
    return fn(ctx, r, req);
  };
}

// Helpers shared by handlers. string_param: a non-empty string of a spec the typed requests carry
// as JSON (a kernel, a custom op's reference), with the wire's wording for a missing one.
Result<std::string> string_param(const Json& params, const char* name);
std::int64_t now_ms();

}  // namespace gpuemu::server
