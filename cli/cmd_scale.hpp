// gpuemu push status | backlog | retry | rejected | wait, gpuemu calibrations list | export |
// import: one options struct and run function each; register_scale_commands binds the flags. Each
// run_* talks to the daemon at `daemon`, prints on `out`, returns the exit code and throws
// GpuemuException on an error.
#pragma once

#include "cli_common.hpp"

#include <cstdint>
#include <ostream>
#include <string>

namespace gpuemu::cli {

// gpuemu push status | retry | rejected [--json]
struct PushOptions {
  bool json = false;
};
int run_push_status(const PushOptions& o, const DaemonAddress& daemon, std::ostream& out);
int run_push_retry(const PushOptions& o, const DaemonAddress& daemon, std::ostream& out);
int run_push_rejected(const PushOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct PushBacklogOptions {
  std::string op;             // only this op
  std::int64_t since_ms = 0;  // only what was stored at or after (unix ms)
  bool no_runs = false;       // failures only
  bool json = false;
};
int run_push_backlog(const PushBacklogOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct PushWaitOptions {
  double timeout_s = 300;
  bool json = false;
};
// Exit 1 when something is still pending after the timeout.
int run_push_wait(const PushWaitOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct CalibrationsListOptions {
  std::string op;
  bool json = false;
};
int run_calibrations_list(const CalibrationsListOptions& o, const DaemonAddress& daemon,
                          std::ostream& out);

struct CalibrationsExportOptions {
  std::string op;
  std::string output;  // empty: `out`
};
int run_calibrations_export(const CalibrationsExportOptions& o, const DaemonAddress& daemon,
                            std::ostream& out);

struct CalibrationsImportOptions {
  std::string file;  // an export's JSON; "-": stdin
  bool replace = false;
  bool json = false;
};
int run_calibrations_import(const CalibrationsImportOptions& o, const DaemonAddress& daemon,
                            std::ostream& out);

}  // namespace gpuemu::cli
