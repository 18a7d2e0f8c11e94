// gpuemu-daemon: owns the fuzzer, the fp64 oracle, the calibrator, the analyzer and the failure
// store; clients talk to it over NNG (docs/protocol.md). One daemon per GPUEMU_HOME (a lock file).
#include "gpuemu/engine/malloc_tuning.hpp"
#include "gpuemu/engine/op.hpp"
#include "gpuemu/engine/oracle_backend.hpp"
#include "server/nng_server.hpp"
#include "server/pusher.hpp"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <malloc.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace fs = std::filesystem;
using namespace gpuemu;

namespace {

struct Options {
  std::string home;
  bool foreground = false;
  std::string tcp;
  std::string token_file;
  std::string tls_cert, tls_key;
  int workers = 0;
  std::string python;
  double script_timeout = 60.0;
  std::int64_t script_memory_mb = 0;
  std::string log_level = "info";
  std::string oracle;  // cpu | cuda; empty: $GPUEMU_ORACLE, else cpu
  std::size_t log_max_bytes = 5 * 1024 * 1024;  // daemon.log rotates past this size ...
  std::size_t log_files = 3;                     // ... keeping daemon.1.log .. daemon.N.log
  int drain_s = 30;
  std::size_t tcp_max_message_mib = 256;
  std::size_t max_message_mib = server::k_max_message_mib;
  std::int64_t max_batch_cases = 100000;
  std::int64_t max_case_elements = std::int64_t{1} << 28;
  std::size_t case_cache_mib = 512;
  bool allow_remote_scripts = false;
  bool allow_remote_shutdown = false;
  // Pushing to a central daemon (docs/scale.md).
  std::string push_to, push_token_file, push_tls_ca;
  std::size_t push_batch = 64;
  std::size_t push_max_record_mib = 240;
  double push_timeout_s = 30, push_retry_max_s = 30;
  std::int64_t calibration_sync_s = 300;
};

Status make_private_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::io_error, "cannot create " + dir + ": " + ec.message());
  if (chmod(dir.c_str(), 0700) != 0)
    return make_error(ErrorCode::io_error,
                      "cannot chmod 0700 " + dir + ": " + std::strerror(errno));
  return {};
}

// Holds the per-home lock for the life of the process. The kernel drops it when the process dies,
// so a crashed daemon never leaves a stale lock behind.
Result<int> take_lock(const protocol::HomePaths& paths) {
  const int fd = open(paths.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return make_error(ErrorCode::io_error,
                      "cannot open " + paths.lock + ": " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string owner = "another gpuemu-daemon";
    std::ifstream info(paths.info);
    Json j = Json::parse(info, nullptr, false);
    if (j.is_object() && j.contains("pid"))
      owner += " (pid " + std::to_string(j["pid"].get<long>()) + ")";
    close(fd);
    return make_error(ErrorCode::conflict, owner + " already serves " + paths.home);
  }
  return fd;
}

void setup_logging(const protocol::HomePaths& paths, const Options& o) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
      paths.logs_dir + "/daemon.log", o.log_max_bytes, o.log_files));
  if (o.foreground) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>("gpuemu", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::from_str(o.log_level));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %L [%t] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

// Runs the daemon until a signal or a shutdown request. `ready` gets "ok" or an error line.
int serve(const Options& o, const protocol::HomePaths& paths,
          const std::function<void(const std::string&)>& ready) {
  auto fail = [&](const Error& e) {
    ready("error: " + e.message);
    spdlog::error("[E-start] {}", e.message);
    return e.code == ErrorCode::conflict ? 3 : 1;
  };
  if (paths.socket.size() >= 107)  // sizeof(sockaddr_un::sun_path) - 1
    return fail(make_error(
        ErrorCode::invalid_argument,
        "the socket path " + paths.socket + " is " + std::to_string(paths.socket.size()) +
            " bytes; Unix sockets allow 107: set GPUEMU_HOME to a shorter directory"));
  for (const auto& d : {paths.home, paths.run_dir, paths.logs_dir, paths.store_dir})
    if (auto st = make_private_dir(d); !st) return fail(st.error());
  auto lock = take_lock(paths);
  if (!lock) return fail(lock.error());
  setup_logging(paths, o);
  // A socket file left by a daemon that died is stale: we hold the lock, so nobody serves it.
  if (fs::exists(paths.socket)) {
    spdlog::warn("[W-stale] removing the stale socket {}", paths.socket);
    unlink(paths.socket.c_str());
  }
  // The fp64 oracle's backend, chosen here (after the fork: CUDA must start in the process that
  // uses it). Asked for and not available is an error at start, never a silent CPU fallback.
  {
    std::string oracle = o.oracle;
    if (const char* v = std::getenv("GPUEMU_ORACLE"); oracle.empty() && v && *v) oracle = v;
    if (!oracle.empty()) {
      if (Status st = oracle_backend::select(oracle); !st) return fail(st.error());
    }
    spdlog::info("[I-oracle] fp64 oracle: {}", oracle_backend::description());
  }
  auto engine = Engine::create_default();
  if (!engine) return fail(engine.error());
  server::DaemonContext ctx(paths, std::move(engine).value());
  ctx.config.home = paths.home;
  ctx.config.tcp_url = o.tcp;
  ctx.config.tls_cert = o.tls_cert;
  ctx.config.tls_key = o.tls_key;
  ctx.config.workers = o.workers;
  ctx.config.python = o.python;
  ctx.config.script_timeout_s = o.script_timeout;
  ctx.config.script_memory_mb = o.script_memory_mb;
  ctx.config.drain_timeout = std::chrono::seconds(o.drain_s);
  ctx.started_ms = server::now_ms();
  ctx.config.tcp_max_message_bytes = o.tcp_max_message_mib << 20;
  ctx.config.max_message_bytes = o.max_message_mib << 20;
  ctx.config.max_batch_cases = o.max_batch_cases;
  ctx.config.max_case_elements = o.max_case_elements;
  ctx.case_cache = std::make_unique<server::CaseCache>(o.case_cache_mib << 20);
  ctx.config.allow_remote_scripts = o.allow_remote_scripts;
  ctx.config.allow_remote_shutdown = o.allow_remote_shutdown;
  if (!o.token_file.empty()) {
    std::ifstream t(o.token_file);
    std::getline(t, ctx.config.token);
    if (ctx.config.token.size() < 16)
      return fail(make_error(ErrorCode::invalid_argument,
                             "the token in " + o.token_file + " must have at least 16 characters"));
  } else if (const char* t = std::getenv("GPUEMU_TOKEN"); t && *t && !o.tcp.empty()) {
    // Only a tcp listener uses it (clients of a local daemon may have it set for another one).
    ctx.config.token = t;
    if (ctx.config.token.size() < 16)
      return fail(make_error(ErrorCode::invalid_argument,
                             "the token in $GPUEMU_TOKEN must have at least 16 characters"));
  }
  server::PushConfig push;
  push.to = o.push_to;
  if (!push.to.empty()) {
    if (push.to.find("://") == std::string::npos)
      return fail(make_error(ErrorCode::invalid_argument,
                             "--push-to wants an address (tcp://HOST:PORT, tls+tcp://HOST:PORT or "
                             "ipc://PATH), not '" + push.to + "'"));
    if (!o.push_token_file.empty()) {
      std::ifstream t(o.push_token_file);
      if (!t || !std::getline(t, push.token) || push.token.empty())
        return fail(make_error(ErrorCode::invalid_argument,
                               "cannot read the central daemon's token from " + o.push_token_file));
      while (!push.token.empty() && (push.token.back() == '\r' || push.token.back() == ' '))
        push.token.pop_back();
    } else if (push.to.rfind("ipc://", 0) != 0) {
      return fail(make_error(ErrorCode::invalid_argument,
                             "--push-to " + push.to + " needs --push-token-file (the central "
                             "daemon's token; or $GPUEMU_PUSH_TOKEN_FILE)"));
    }
    push.tls_ca = o.push_tls_ca;
    push.batch = o.push_batch;
    push.max_record_bytes = o.push_max_record_mib << 20;
    push.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.push_timeout_s * 1000));
    push.retry_max = std::chrono::milliseconds(static_cast<std::int64_t>(o.push_retry_max_s * 1000));
    push.calibration_sync = std::chrono::seconds(o.calibration_sync_s);
  }
  StoreOptions store_options;
  store_options.outbox = !push.to.empty();
  auto store = Store::open(paths.store_dir, store_options);
  if (!store) return fail(store.error());
  ctx.store = std::move(store).value();
  if (auto cals = ctx.store->list_calibrations()) {
    for (const Json& c : *cals)
      if (auto dt = parse_dtype(c.value("dtype", "")); dt && c.contains("envelope"))
        ctx.engine.envelopes().set(c.value("op", ""), *dt, c["envelope"].get<double>(), c);
    if (!cals->empty()) spdlog::info("loaded {} calibrations from the store", cals->size());
  }

  std::atomic<bool> stop{false};
  ctx.request_stop = [&stop] { stop = true; };
  server::NngServer server(ctx);
  if (auto st = server.listen(paths.url); !st) return fail(st.error());
  if (!o.tcp.empty())
    if (auto st = server.listen(o.tcp); !st) return fail(st.error());
  if (auto st = server.start(); !st) return fail(st.error());
  std::unique_ptr<server::Pusher> pusher;
  if (!push.to.empty()) {
    pusher = std::make_unique<server::Pusher>(ctx, push);
    ctx.pusher = pusher.get();
    pusher->start();
  }
  {
    std::ofstream info(paths.info);
    info << Json{{"pid", static_cast<long>(getpid())},
                 {"socket", paths.socket},
                 {"url", paths.url},
                 {"version", GPUEMU_VERSION},
                 {"started_ms", ctx.started_ms},
                 {"home", paths.home}}
                .dump()
         << "\n";
  }
  spdlog::info("gpuemu-daemon {} (pid {}) serving {}", GPUEMU_VERSION, getpid(), paths.home);
  ready("ok");

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  // An idle daemon gives back what it keeps for speed: after 2 s without a request, the reference
  // heap's kept blocks and glibc's free memory (malloc_trim), and the kept cases nobody fetched or
  // submitted for a minute. A run in progress keeps its cases (its kernel may take a while).
  std::int64_t seen_requests = -1;
  int idle_ticks = 0;
  bool released = true;
  while (!stop) {
    timespec ts{0, 100'000'000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) {
      spdlog::info("signal {}: shutting down", strsignal(sig));
      break;
    }
    const std::int64_t r = ctx.requests.load();
    if (r != seen_requests || ctx.in_flight.load() > 0) {
      seen_requests = r;
      idle_ticks = 0;
      released = false;
    } else if (++idle_ticks >= 20 && !released) {
      if (ctx.case_cache) ctx.case_cache->drop_unused(std::chrono::seconds(60));
      gpuemu::detail::ref_release_cache();
      ::malloc_trim(0);
      released = ctx.case_cache == nullptr || ctx.case_cache->size() == 0;
      idle_ticks = 0;
    }
  }
  spdlog::info("draining (up to {} s)", o.drain_s);
  const bool clean = server.stop(std::chrono::seconds(o.drain_s));
  if (pusher) pusher->stop();  // what it had not pushed stays in the outbox for the next start
  unlink(paths.socket.c_str());
  unlink(paths.info.c_str());
  spdlog::info("stopped{}", clean ? "" : " (without waiting for running requests or the transport)");
  spdlog::shutdown();
  if (!clean) _exit(0);
  ctx.store.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuemu-daemon: the gpuemu validation service", "gpuemu-daemon"};
  Options o;
  app.add_option("--home", o.home, "GPUEMU_HOME (default: $GPUEMU_HOME, else ~/.gpuemu)");
  app.add_flag("--foreground", o.foreground, "stay attached to the terminal and log to stderr too");
  app.add_option("--tcp", o.tcp,
                 "also listen on tls+tcp://HOST:PORT (with --tls-cert, --tls-key) or, on a trusted "
                 "network, tcp://HOST:PORT; either requires a token");
  app.add_option("--tls-cert", o.tls_cert, "PEM certificate (chain) of a tls+tcp:// listener");
  app.add_option("--tls-key", o.tls_key, "PEM private key of a tls+tcp:// listener");
  app.add_option("--token-file", o.token_file,
                 "file whose first line is the tcp token (else $GPUEMU_TOKEN)");
  app.add_option("--tcp-max-message-mb", o.tcp_max_message_mib,
                 "largest message a tcp client may send, in MiB (default 256; larger ones are "
                 "dropped unread)")
      ->check(CLI::Range(std::size_t{1}, server::k_max_message_mib));
  // The limits on one request (docs/reliability.md, "Limits"); each also from the environment, so
  // that a daemon a client autostarts gets them: GPUEMU_MAX_MESSAGE_MB, GPUEMU_MAX_BATCH_CASES,
  // GPUEMU_MAX_CASE_ELEMENTS (the options win).
  if (const char* v = std::getenv("GPUEMU_MAX_MESSAGE_MB"); v && std::atoll(v) > 0)
    o.max_message_mib = std::min(static_cast<std::size_t>(std::atoll(v)),
                                 server::k_max_message_mib);
  if (const char* v = std::getenv("GPUEMU_MAX_BATCH_CASES"); v && std::atoll(v) > 0)
    o.max_batch_cases = std::atoll(v);
  if (const char* v = std::getenv("GPUEMU_MAX_CASE_ELEMENTS"); v && std::atoll(v) > 0)
    o.max_case_elements = std::atoll(v);
  if (const char* v = std::getenv("GPUEMU_CASE_CACHE_MB"); v && *v && std::atoll(v) >= 0)
    o.case_cache_mib = static_cast<std::size_t>(std::atoll(v));
  app.add_option("--max-message-mb", o.max_message_mib,
                 "largest message a local client may send, in MiB (default and most 4095: nng's "
                 "bound, under the protocol's 4 GiB; larger ones are dropped unread)")
      ->check(CLI::Range(std::size_t{1}, server::k_max_message_mib));
  app.add_option("--max-batch-cases", o.max_batch_cases,
                 "most cases one get_test_batch or submit_outputs may carry (default 100000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}));
  app.add_option("--max-case-elements", o.max_case_elements,
                 "most elements one case may hold, inputs and outputs together (default 2^28)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--case-cache-mb", o.case_cache_mib,
                 "MiB of handed-out cases kept, with their references computed while the client "
                 "runs its kernel, for the submissions that judge them (default 512, 0: none; "
                 "also GPUEMU_CASE_CACHE_MB)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20));
  app.add_flag("--allow-remote-scripts", o.allow_remote_scripts,
               "let tcp clients run script kernels and script references (off: only the local "
               "socket may)");
  app.add_flag("--allow-remote-shutdown", o.allow_remote_shutdown,
               "let tcp clients shut the daemon down (off: only the local socket and signals may)");
  // Pushing to a central daemon; also from the environment, so that a daemon a client autostarts
  // on a worker gets them: GPUEMU_PUSH_TO, GPUEMU_PUSH_TOKEN_FILE, GPUEMU_PUSH_TLS_CA.
  if (const char* v = std::getenv("GPUEMU_PUSH_TO"); v && *v) o.push_to = v;
  if (const char* v = std::getenv("GPUEMU_PUSH_TOKEN_FILE"); v && *v) o.push_token_file = v;
  if (const char* v = std::getenv("GPUEMU_PUSH_TLS_CA"); v && *v) o.push_tls_ca = v;
  app.add_option("--push-to", o.push_to,
                 "push every failure and run summary this daemon stores to the central daemon at "
                 "this address (tcp://HOST:PORT, tls+tcp://HOST:PORT, ipc://PATH), queueing them "
                 "in the store until it acknowledges them, and take its calibrations "
                 "(docs/scale.md; also $GPUEMU_PUSH_TO)");
  app.add_option("--push-token-file", o.push_token_file,
                 "file whose first line is the central daemon's token ($GPUEMU_PUSH_TOKEN_FILE)");
  app.add_option("--push-tls-ca", o.push_tls_ca,
                 "PEM certificates the central tls+tcp:// daemon must chain to "
                 "($GPUEMU_PUSH_TLS_CA)");
  app.add_option("--push-batch", o.push_batch, "records per push, at most (default 64)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000}));
  app.add_option("--push-max-record-mb", o.push_max_record_mib,
                 "a failure whose snapshot is larger is not pushed but set aside (gpuemu push "
                 "rejected); keep it under the central daemon's --tcp-max-message-mb (default 240)")
      ->check(CLI::Range(std::size_t{1}, server::k_max_message_mib));
  app.add_option("--push-timeout", o.push_timeout_s, "seconds one push may take (default 30)")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--push-retry-max", o.push_retry_max_s,
                 "longest wait, in seconds, between retries of a failed push (default 30; the "
                 "wait starts at 0.25 s and doubles)")
      ->check(CLI::Range(0.25, 3600.0));
  app.add_option("--calibration-sync", o.calibration_sync_s,
                 "seconds between pulls of the central daemon's calibrations (default 300; 0: "
                 "never)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86400 * 7}));
  app.add_option("--workers", o.workers, "worker threads (default: max(2, cores))");
  app.add_option("--python", o.python,
                 "interpreter for script kernels (default: the project's .venv)");
  app.add_option("--script-timeout", o.script_timeout, "seconds a script kernel may take per case");
  if (const char* v = std::getenv("GPUEMU_SCRIPT_MEMORY_MB"); v && std::atoll(v) > 0)
    o.script_memory_mb = std::atoll(v);
  app.add_option("--script-memory-mb", o.script_memory_mb,
                 "most memory (RLIMIT_DATA, MiB) a script kernel's or reference's process may "
                 "allocate; 0: no limit (default; also $GPUEMU_SCRIPT_MEMORY_MB)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  app.add_option("--oracle", o.oracle,
                 "where the fp64 oracle runs: cpu, or cuda (the GEMM-shaped and attention "
                 "references on the GPU, docs/gpu.md; default: $GPUEMU_ORACLE, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--log-level", o.log_level, "trace | debug | info | warn | error");
  app.add_option("--drain-timeout", o.drain_s, "seconds in-flight requests get at shutdown");
  if (const char* v = std::getenv("GPUEMU_LOG_MAX_BYTES"); v && std::atoll(v) > 0)
    o.log_max_bytes = static_cast<std::size_t>(std::atoll(v));
  app.add_option("--log-max-bytes", o.log_max_bytes,
                 "rotate logs/daemon.log past this many bytes (default 5 MiB, or "
                 "$GPUEMU_LOG_MAX_BYTES)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  app.add_option("--log-files", o.log_files, "rotated logs kept: daemon.1.log .. daemon.N.log")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100}));
  app.set_version_flag("--version", std::string("gpuemu-daemon ") + GPUEMU_VERSION);
  CLI11_PARSE(app, argc, argv);
  // Blocks up to 32 MiB stay on the heap (malloc_tuning.hpp); what a large request or a listing
  // leaves is still handed back by the explicit malloc_trim after it (nng_server.cpp).
  tune_malloc_for_cases(MallocTuning::always);
  const protocol::HomePaths paths =
      o.home.empty() ? protocol::home_paths() : protocol::home_paths(o.home);
  setenv("GPUEMU_HOME", paths.home.c_str(), 1);
  signal(SIGPIPE, SIG_IGN);  // a client or a script kernel that goes away must not kill us

  if (o.foreground) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set,
                    nullptr);  // before any thread starts: only sigtimedwait sees them
    return serve(o, paths, [](const std::string& s) {
      if (s != "ok") std::cerr << "gpuemu-daemon: " << s << "\n";
    });
  }
  // Background: detach (double fork), and tell the starter whether we came up.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid > 0) {
    close(fds[1]);
    std::string line;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) line.append(buf, static_cast<std::size_t>(n));
    if (line.rfind("ok", 0) == 0) return 0;
    std::cerr << "gpuemu-daemon: "
              << (line.empty() ? "the daemon exited during start (see " + paths.logs_dir + ")"
                               : line)
              << "\n";
    return line.find("already serves") != std::string::npos ? 3 : 1;
  }
  close(fds[0]);
  setsid();
  if (fork() > 0) _exit(0);
  const int null = open("/dev/null", O_RDWR);
  dup2(null, 0);
  dup2(null, 1);
  dup2(null, 2);
  if (null > 2) close(null);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int ready_fd = fds[1];
  return serve(o, paths, [&ready_fd](const std::string& s) {
    if (ready_fd < 0) return;
    (void)!write(ready_fd, s.data(), s.size());
    // The starter reads until the pipe closes. On success that is now; on a failure it is when
    // this process has exited, its lock released and its files cleaned up, so a start tried
    // right after the failed one finds the home free (not "already serves", nor a socket this
    // process would still unlink).
    if (s.rfind("ok", 0) != 0) return;
    close(ready_fd);
    ready_fd = -1;
  });
}
