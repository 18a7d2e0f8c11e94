// gpuemu daemon start | stop | status | raw | logs: one options struct and run function each;
// register_daemon_commands binds the flags. Each run_* prints on `out`, returns the exit code and
// throws GpuemuException on an error.
#pragma once

#include "cli_common.hpp"

#include <cstddef>
#include <istream>
#include <ostream>

namespace gpuemu::cli {

struct DaemonStartOptions {
  bool foreground = false;  // exec the daemon in this terminal
  bool json = false;
};
int run_daemon_start(const DaemonStartOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct DaemonStopOptions {
  bool json = false;
  double wait_s = 60;  // how long to wait for it to exit
};
int run_daemon_stop(const DaemonStopOptions& o, std::ostream& out);

struct DaemonStatusOptions {
  bool json = false;
};
int run_daemon_status(const DaemonStatusOptions& o, std::ostream& out);

struct DaemonRawOptions {
  double timeout_s = 30;
};
// One message read from `in` as is, the reply written to `out`.
int run_daemon_raw(const DaemonRawOptions& o, std::istream& in, std::ostream& out);

struct DaemonLogsOptions {
  std::size_t lines = 50;
  bool follow = false;
};
int run_daemon_logs(const DaemonLogsOptions& o, std::ostream& out);

}  // namespace gpuemu::cli
