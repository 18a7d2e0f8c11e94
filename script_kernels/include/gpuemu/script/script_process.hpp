// The long-lived Python subprocess behind script kernels and custom ops' script references
// (python/gpuemu/_script_runner.py): started with a Unix socket as its stdin/stdout, spoken to with
// length-prefixed gpuemu frames (docs/script-kernels.md, "The exchange"), restarted after a crash
// or a timeout. script_kernel.cpp and script_reference.cpp build their requests on top of it.
#pragma once

#include "gpuemu/protocol/protocol.hpp"
#include "gpuemu/script/script_kernel.hpp"

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gpuemu::script {

// The string at h[key], or `fallback` when it is missing or not a string (script headers).
std::string string_field(const Json& h, const char* key, const char* fallback = "");

class ScriptProcess {
 public:
  // `role` names the script in messages: "kernel script" or "reference script".
  ScriptProcess(ScriptKernelSpec spec, std::vector<std::string> argv,
                std::string role = "kernel script");
  ~ScriptProcess();
  ScriptProcess(const ScriptProcess&) = delete;
  ScriptProcess& operator=(const ScriptProcess&) = delete;

  // One request and its reply, within spec().timeout_s (starting the process first when it is not
  // running). `what` names the call in messages ("case 3 of softmax"). Calls are serialised.
  // Errors: see script_kernel.hpp (invalid_argument: the process died; timeout; protocol_error).
  Result<protocol::Frame> exchange(const protocol::Frame& request, const std::string& what);
  const ScriptKernelSpec& spec() const { return m_spec; }
  const std::string& role() const { return m_role; }

  Status start_locked();
  std::mutex& mutex() { return m_mutex; }
  // The runner's hello at its last start (its versions; in torch_op mode the op's schema).
  Json hello() {
    std::lock_guard lock(m_mutex);
    return m_hello;
  }

 private:
  enum class Io { ok, timed_out, closed };  // what one wait on the child's socket came to
  using Clock = std::chrono::steady_clock;

  Status spawn();
  void stop();
  int reap(bool force);
  void drain_stderr();
  Io wait_for(short events, Clock::time_point deadline);
  Io write_all(const std::vector<std::byte>& bytes, Clock::time_point deadline);
  Io read_exact(std::byte* dst, std::size_t n, Clock::time_point deadline);
  Result<std::vector<std::byte>> read_message(Clock::time_point deadline, Io& io);
  Error died(const std::string& when, ErrorCode code = ErrorCode::invalid_argument);

  ScriptKernelSpec m_spec;
  std::vector<std::string> m_argv;
  std::string m_role;
  std::mutex m_mutex;
  pid_t m_pid = -1;
  int m_sock = -1;  // our end of the child's stdin/stdout
  int m_err = -1;   // the read end of the child's stderr
  std::string m_stderr;
  Json m_hello;
};

// The last `n` bytes of `s`, cut at a line start where one is near ("..." in front when cut).
std::string tail_of(const std::string& s, std::size_t n);
inline constexpr std::size_t k_script_traceback_report = 8 * 1024;  // of a traceback in messages

// Checks `spec` (framework, function, timeouts, the script exists), resolves the runner and the
// interpreter, and starts the process (its hello read): make_script_kernel's errors.
Result<std::shared_ptr<ScriptProcess>> start_script_process(ScriptKernelSpec spec,
                                                            const std::string& role);

}  // namespace gpuemu::script
