// How CLI commands reach the daemon: connect (starting it when none answers) and print what it
// returns.
#pragma once

#include "cli_common.hpp"

#include <gpuemu/protocol/client.hpp>
#include <gpuemu/engine/engine.hpp>
#include <gpuemu/protocol/wire/wire.hpp>

#include <memory>

namespace gpuemu::cli {

// A client of the daemon at `where` (empty: that of the environment, $GPUEMU_HOME's); throws
// GpuemuException when none answers (and, with autostart, none could be started: a remote daemon is
// never started).
std::unique_ptr<DaemonClient> connect_daemon(const DaemonAddress& where, bool autostart = true);
// A request whose errors are thrown.
Json call_daemon(DaemonClient& client, const std::string& method, Json params,
                 protocol::Frame* reply = nullptr);
// A typed request (gpuemu/protocol/wire/*.hpp) whose errors are thrown.
template <class Request>
Json call_daemon(DaemonClient& client, const Request& request, protocol::Frame* reply = nullptr) {
  return call_daemon(client, std::string(Request::k_method), to_json(request), reply);
}

// `gpuemu fuzz` through the daemon at `where`, the report printed on `out`; returns the exit code.
int fuzz_through_daemon(const DaemonAddress& where, const wire::FuzzRequest& req, bool json,
                        const std::string& kernel_label, const std::string& strategy,
                        std::ostream& out);

// A fuzz run's report (the daemon's `fuzz` reply, or FuzzReport::to_json of a run in this process:
// the same fields) as JSON or for a human, on `out`; returns the exit code. `stored`: the failures
// went to the daemon's store.
int print_fuzz_report(const Json& report, bool json, const std::string& op,
                      const std::string& kernel_label, const std::string& strategy,
                      std::uint64_t seed, bool stored, std::ostream& out);

// One failing case (a failure JSON of the daemon) for a human, on `out`.
void print_failure_json(const Json& failure, const Json* minimized, std::ostream& out);

bool use_color();
std::string red(const std::string& s);
std::string green(const std::string& s);
std::string fmt_number(const Json& v);

// A command's input file ("-": stdin), whole; an unreadable file throws GpuemuException.
std::string read_input_file(const std::string& path);
// Writes an export to `path` (empty: `out`) and says on stderr what was written where.
void write_export(const std::string& path, const std::string& text, std::size_t count,
                  const std::string& what, std::ostream& out);

}  // namespace gpuemu::cli
