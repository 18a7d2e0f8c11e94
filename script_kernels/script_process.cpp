// The script subprocess (script_process.hpp; docs/script-kernels.md is the spec of the exchange).
#include "gpuemu/script/script_process.hpp"

#include "gpuemu/engine/install_paths.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

extern char** environ;

namespace gpuemu::script {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t k_stderr_keep = 16 * 1024;   // bytes of the child's stderr kept
constexpr std::size_t k_stderr_report = 2 * 1024;  // bytes of it put in an error message
constexpr std::size_t k_traceback_report = k_script_traceback_report;
constexpr auto k_exit_grace = std::chrono::milliseconds(2000);

std::string seconds_text(double s) {
  std::ostringstream o;
  o << s;
  return o.str() + " s";
}

std::string errno_text(int err) {
  return std::strerror(err);
}

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xffu));
}

std::string source_dir() {
#ifdef GPUEMU_SOURCE_DIR
  return GPUEMU_SOURCE_DIR;
#else
  return {};
#endif
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

std::string string_field(const Json& h, const char* key, const char* fallback) {
  auto it = h.find(key);
  return it != h.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

std::string tail_of(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t from = s.size() - n;
  const std::size_t nl = s.find('\n', from);
  if (nl != std::string::npos && nl + 1 < s.size() && nl - from < 200) from = nl + 1;
  return "..." + s.substr(from);
}

ScriptProcess::ScriptProcess(ScriptKernelSpec spec, std::vector<std::string> argv, std::string role)
    : m_spec(std::move(spec)), m_argv(std::move(argv)), m_role(std::move(role)) {}

ScriptProcess::~ScriptProcess() { stop(); }

Status ScriptProcess::spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return make_error(ErrorCode::io_error, "socketpair: " + errno_text(errno));
  int ep[2];
  if (::pipe2(ep, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return make_error(ErrorCode::io_error, "pipe: " + errno_text(err));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawn_file_actions_adddup2(&fa, ep[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);  // descriptors the daemon left inheritable
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group (a timeout kills what the kernel started too), no blocked signals and
  // default dispositions whatever the daemon's threads set.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (auto& a : m_argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  ::close(ep[1]);
  if (rc != 0) {
    ::close(sv[0]);
    ::close(ep[0]);
    return make_error(ErrorCode::tool_missing, "cannot start the Python interpreter '" + m_argv[0] +
                                                   "': " + errno_text(rc) +
                                                   " (set GPUEMU_PYTHON or the kernel's 'python')");
  }
  // Its limits, while the interpreter starts (the script is imported only after the hello):
  // never a core file; its data segment bounded when the daemon was told to.
  const struct rlimit no_core{0, 0};
  ::prlimit(pid, RLIMIT_CORE, &no_core, nullptr);
  if (m_spec.memory_limit_mb > 0) {
    const auto bytes = static_cast<rlim_t>(m_spec.memory_limit_mb) << 20;
    const struct rlimit data{bytes, bytes};
    if (::prlimit(pid, RLIMIT_DATA, &data, nullptr) != 0) {
      const int err = errno;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      ::close(sv[0]);
      ::close(ep[0]);
      return make_error(ErrorCode::internal, "cannot limit the " + m_role + "'s memory: " + errno_text(err));
    }
  }
  ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  ::fcntl(ep[0], F_SETFL, ::fcntl(ep[0], F_GETFL) | O_NONBLOCK);
  m_pid = pid;
  m_sock = sv[0];
  m_err = ep[0];
  m_stderr.clear();
  return {};
}

// Waits for the child to exit (killing its group first when `force`, or when it does not exit
// within the grace period once its pipes are closed); returns the wait status (-1: unknown).
int ScriptProcess::reap(bool force) {
  if (m_pid <= 0) return -1;
  if (force) ::kill(-m_pid, SIGKILL);
  int status = -1;
  const auto deadline = Clock::now() + k_exit_grace;
  for (;;) {
    const pid_t r = ::waitpid(m_pid, &status, WNOHANG);
    if (r == m_pid) break;
    if (r < 0 && errno != EINTR) {  // ECHILD: someone else reaped it (SIGCHLD ignored)
      status = -1;
      break;
    }
    if (Clock::now() >= deadline) {
      ::kill(-m_pid, SIGKILL);
      ::kill(m_pid, SIGKILL);
      while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    drain_stderr();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  drain_stderr();
  if (m_err >= 0) ::close(m_err);
  m_err = -1;
  m_pid = -1;
  return status;
}

void ScriptProcess::stop() {
  if (m_pid <= 0) return;
  if (m_sock >= 0) ::close(m_sock);  // end of input: the runner exits by itself
  m_sock = -1;
  ::kill(-m_pid, SIGTERM);
  ::kill(m_pid, SIGTERM);
  reap(false);
}

void ScriptProcess::drain_stderr() {
  if (m_err < 0) return;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(m_err, buf, sizeof buf);
    if (n > 0) {
      m_stderr.append(buf, static_cast<std::size_t>(n));
      if (m_stderr.size() > 2 * k_stderr_keep) m_stderr.erase(0, m_stderr.size() - k_stderr_keep);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {  // every holder closed it
      ::close(m_err);
      m_err = -1;
    }
    return;
  }
}

ScriptProcess::Io ScriptProcess::wait_for(short events, Clock::time_point deadline) {
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return Io::timed_out;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    pollfd fds[2] = {{m_sock, events, 0}, {m_err, POLLIN, 0}};
    const int rc =
        ::poll(fds, m_err >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc < 0 && errno != EINTR) return Io::closed;
    if (rc <= 0) continue;
    if (m_err >= 0 && fds[1].revents) drain_stderr();
    if (fds[0].revents & (events | POLLHUP | POLLERR)) return Io::ok;
  }
}

ScriptProcess::Io ScriptProcess::write_all(const std::vector<std::byte>& bytes, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(m_sock, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Io io = wait_for(POLLOUT, deadline); io != Io::ok) return io;
      continue;
    }
    return Io::closed;  // EPIPE, ECONNRESET: the child is gone
  }
  return Io::ok;
}

ScriptProcess::Io ScriptProcess::read_exact(std::byte* dst, std::size_t n, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t k = ::recv(m_sock, dst + done, n - done, 0);
    if (k > 0) {
      done += static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0) return Io::closed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Io io = wait_for(POLLIN, deadline); io != Io::ok) return io;
      continue;
    }
    return Io::closed;
  }
  return Io::ok;
}

Result<std::vector<std::byte>> ScriptProcess::read_message(Clock::time_point deadline, Io& io) {
  std::byte prefix[8];
  std::vector<std::byte> body;
  if ((io = read_exact(prefix, 8, deadline)) != Io::ok) return body;
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(prefix[i]) << (8 * i);
  if (n > protocol::k_max_frame_bytes)
    return make_error(ErrorCode::protocol_error, "the " + m_role + "'s runner sent a frame of " +
                                                     std::to_string(n) + " bytes (limit 4 GiB)");
  // Grown as the bytes arrive: a runner that claims gigabytes and sends little costs little.
  constexpr std::uint64_t chunk = std::uint64_t{64} << 20;
  for (std::uint64_t have = 0; have < n && io == Io::ok;) {
    const std::uint64_t take = std::min(chunk, n - have);
    body.resize(static_cast<std::size_t>(have + take));
    io = read_exact(body.data() + have, static_cast<std::size_t>(take), deadline);
    have += take;
  }
  return body;
}

// The error of a child that closed its end: how it ended and the end of its stderr.
Error ScriptProcess::died(const std::string& when, ErrorCode code) {
  if (m_sock >= 0) ::close(m_sock);
  m_sock = -1;
  const int status = reap(false);
  std::string how = "the " + m_role + "'s process ";
  if (status == -1) {
    how += "ended";
  } else if (WIFEXITED(status)) {
    how += "exited with status " + std::to_string(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    how += "was killed by signal " + std::to_string(sig) +
           (name ? std::string(" (") + name + ")" : std::string());
  } else {
    how += "ended (wait status " + std::to_string(status) + ")";
  }
  how += " " + when;
  if (!m_stderr.empty()) how += "; its stderr ended with:\n" + tail_of(m_stderr, k_stderr_report);
  return make_error(code, how);
}

Status ScriptProcess::start_locked() {
  GPUEMU_TRY_STATUS(spawn());
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(m_spec.start_timeout_s));
  Io io = Io::ok;
  auto body = read_message(deadline, io);
  if (!body) {
    stop();
    return body.error();
  }
  if (io == Io::timed_out) {
    ::close(m_sock);
    m_sock = -1;
    reap(true);
    return make_error(ErrorCode::timeout, "the " + m_role + " " + m_spec.script +
                                              " did not load within " +
                                              seconds_text(m_spec.start_timeout_s));
  }
  if (io == Io::closed)
    return died(
        "before it said it was ready (is '" + m_argv[0] + "' a Python 3 interpreter with numpy?)",
        ErrorCode::tool_missing);
  auto frame = protocol::decode(*body);
  if (!frame) {
    stop();
    return make_error(ErrorCode::protocol_error,
                      "the " + m_role + "'s runner sent a bad hello: " + frame.error().message);
  }
  const Json& h = frame->header;
  if (h.contains("ready") && h["ready"].is_boolean() && h["ready"].get<bool>()) {
    m_hello = h;
    return {};
  }
  const std::string error = string_field(h, "error", "(no message)");
  const std::string tb = string_field(h, "traceback");
  const bool framework = string_field(h, "stage") == "framework";
  stop();
  if (framework)
    return make_error(ErrorCode::tool_missing,
                      "the Python interpreter '" + m_argv[0] + "' cannot run a " +
                          m_spec.framework + " kernel: " + error +
                          (tb.empty() ? "" : "\n" + tail_of(tb, k_traceback_report)));
  return make_error(ErrorCode::invalid_argument,
                    "the " + m_role + " " + m_spec.script + " (function '" + m_spec.function +
                        "') could not be loaded: " + error +
                        (tb.empty() ? "" : "\n" + tail_of(tb, k_traceback_report)));
}

Result<protocol::Frame> ScriptProcess::exchange(const protocol::Frame& request,
                                                const std::string& what) {
  std::lock_guard lock(m_mutex);
  if (m_pid <= 0) GPUEMU_TRY_STATUS(start_locked());
  const std::vector<std::byte> frame = protocol::encode(request);
  std::vector<std::byte> message;
  message.reserve(8 + frame.size());
  put_u64(message, frame.size());
  message.insert(message.end(), frame.begin(), frame.end());

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(m_spec.timeout_s));
  Io io = write_all(message, deadline);
  Result<std::vector<std::byte>> body = std::vector<std::byte>{};
  if (io == Io::ok) body = read_message(deadline, io);
  if (!body) {
    ::close(m_sock);
    m_sock = -1;
    reap(true);
    return body.error();
  }
  if (io == Io::timed_out) {
    ::close(m_sock);
    m_sock = -1;
    reap(true);  // started again on the next call
    return make_error(ErrorCode::timeout,
                      "the " + m_role + " did not return within " + seconds_text(m_spec.timeout_s));
  }
  if (io == Io::closed) return died("while running " + what);
  auto reply = protocol::decode(*body);
  if (!reply) {
    ::close(m_sock);
    m_sock = -1;
    reap(true);
    return make_error(ErrorCode::protocol_error,
                      "the " + m_role + "'s runner sent a bad reply: " + reply.error().message);
  }
  return std::move(reply).value();
}

Result<std::string> locate_script_runner(const std::string& runner) {
  if (!runner.empty()) {
    if (!is_file(runner))
      return make_error(ErrorCode::tool_missing,
                        "the script runner '" + runner + "' does not exist");
    return fs::absolute(runner).string();
  }
  std::vector<fs::path> tried;
  if (const char* dir = std::getenv("GPUEMU_PYTHON_DIR"); dir && *dir)
    tried.push_back(fs::path(dir) / "gpuemu" / "_script_runner.py");
  // installed: the wheel's gpuemu/bin/../_script_runner.py, the .deb's /usr/share/gpuemu/
  if (const std::string img = image_dir(); !img.empty())
    tried.push_back((fs::path(img) / ".." / "_script_runner.py").lexically_normal());
  if (const std::string data = installed_data_dir(); !data.empty())
    tried.push_back(fs::path(data) / "_script_runner.py");
  if (const std::string src = source_dir(); !src.empty())
    tried.push_back(fs::path(src) / "python" / "gpuemu" / "_script_runner.py");
  std::string where;
  for (const auto& p : tried) {
    if (is_file(p)) return fs::absolute(p).string();
    where += (where.empty() ? "" : ", ") + p.string();
  }
  return make_error(ErrorCode::tool_missing,
                    "cannot find gpuemu's _script_runner.py (looked in: " +
                        (where.empty() ? std::string("nowhere") : where) +
                        "); set GPUEMU_PYTHON_DIR to the directory holding gpuemu/");
}

std::string default_script_python(const std::string& runner_path) {
  if (const char* env = std::getenv("GPUEMU_PYTHON"); env && *env) return env;
  std::vector<fs::path> trees;
  if (!runner_path.empty())
    trees.push_back(fs::path(runner_path).parent_path().parent_path().parent_path());
  if (const std::string src = source_dir(); !src.empty()) trees.push_back(src);
  for (const auto& tree : trees) {
    const fs::path venv = tree / ".venv" / "bin" / "python";
    if (::access(venv.c_str(), X_OK) == 0) return venv.string();
  }
  // A wheel: <prefix>/lib/pythonX.Y/site-packages/gpuemu/_script_runner.py runs under the
  // interpreter that installed it, <prefix>/bin/pythonX.Y (the venv's, with its numpy and torch).
  if (!runner_path.empty()) {
    const fs::path pkgs = fs::path(runner_path).parent_path().parent_path();
    const fs::path lib_py = pkgs.parent_path();
    if ((pkgs.filename() == "site-packages" || pkgs.filename() == "dist-packages") &&
        lib_py.filename().string().rfind("python", 0) == 0) {
      const fs::path prefix = lib_py.parent_path().parent_path();
      for (const fs::path& cand : {prefix / "bin" / lib_py.filename(), prefix / "bin" / "python3"})
        if (::access(cand.c_str(), X_OK) == 0) return cand.string();
    }
  }
  return "/usr/bin/python3";
}

Result<std::shared_ptr<ScriptProcess>> start_script_process(ScriptKernelSpec spec,
                                                            const std::string& role) {
  if (spec.framework != "numpy" && spec.framework != "torch")
    return make_error(ErrorCode::invalid_argument,
                      "framework '" + spec.framework + "' is not supported (numpy, torch)");
  if (spec.function.empty())
    return make_error(ErrorCode::invalid_argument, "the " + role + " names no function");
  if (!(spec.timeout_s > 0) || !(spec.start_timeout_s > 0))
    return make_error(ErrorCode::invalid_argument, role + " timeouts must be positive");
  if (spec.device.empty()) spec.device = "cpu";
  if (!is_file(spec.script))
    return make_error(ErrorCode::invalid_argument,
                      "the " + role + " '" + spec.script + "' does not exist");
  spec.script = fs::absolute(spec.script).lexically_normal().string();
  GPUEMU_TRY(spec.runner, locate_script_runner(spec.runner));
  if (spec.python.empty()) spec.python = default_script_python(spec.runner);
  std::vector<std::string> argv = {spec.python,  spec.runner,   "--script",    spec.script,
                                   "--function", spec.function, "--framework", spec.framework,
                                   "--device",   spec.device};
  if (spec.mode != "kernel") {
    argv.push_back("--mode");
    argv.push_back(spec.mode);
  }
  auto process = std::make_shared<ScriptProcess>(std::move(spec), std::move(argv), role);
  {
    std::lock_guard lock(process->mutex());
    GPUEMU_TRY_STATUS(process->start_locked());
  }
  return process;
}

}  // namespace gpuemu::script
