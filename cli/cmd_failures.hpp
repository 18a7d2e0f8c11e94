// gpuemu failures list | show | export | import | rm, gpuemu repro ID, gpuemu minimize ID: one
// options struct and run function each; register_failure_commands binds the flags. Each run_*
// talks to the daemon at `daemon`, prints on `out`, returns the exit code and throws
// GpuemuException on an error.
#pragma once

#include "cli_common.hpp"

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace gpuemu::cli {

struct FailuresListOptions {
  std::string op;         // only this op
  std::size_t limit = 0;  // at most N (0: all)
  bool json = false;
};
int run_failures_list(const FailuresListOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct FailuresShowOptions {
  std::string id;
  bool json = false;
};
int run_failures_show(const FailuresShowOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct FailuresExportOptions {
  std::string op;
  std::string output;  // empty: `out`
  bool jsonl = false;
};
int run_failures_export(const FailuresExportOptions& o, const DaemonAddress& daemon,
                        std::ostream& out);

struct FailuresImportOptions {
  std::string file;  // an export's JSON or JSON Lines; "-": stdin
  bool json = false;
};
int run_failures_import(const FailuresImportOptions& o, const DaemonAddress& daemon,
                        std::ostream& out);

struct FailuresRmOptions {
  std::vector<std::string> ids;
  bool json = false;
};
int run_failures_rm(const FailuresRmOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct ReproOptions {
  std::string id;
  bool json = false;
};
// Exit 1 while the failure reproduces (or its regeneration differs from the snapshot).
int run_repro(const ReproOptions& o, const DaemonAddress& daemon, std::ostream& out);

struct MinimizeOptions {
  std::string id;
  int max_evaluations = 200;
  bool json = false;
};
int run_minimize(const MinimizeOptions& o, const DaemonAddress& daemon, std::ostream& out);

}  // namespace gpuemu::cli
