// gpuemu init, gpuemu ci, gpuemu report [merge | verify]: the options structs and run functions
// (docs/ci.md); register_project_commands binds the flags. Each run_* prints on `out`, returns the
// exit code and throws GpuemuException on an error; those that need the daemon talk to the one at
// `daemon`.
#pragma once

#include "cli_common.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpuemu::cli {

// gpuemu init [--force] [--config PATH]
struct InitOptions {
  bool force = false;                // overwrite an existing file
  std::string path = "gpuemu.toml";  // where to write it
};
int run_init(const InitOptions& o, std::ostream& out);

// gpuemu ci: every [[op]] of gpuemu.toml (x dtype) fuzzed through the daemon, and the [lint].
struct CiOptions {
  std::string config;        // the gpuemu.toml ("": search upward)
  std::string junit, sarif;  // also write these reports
  std::string preset;        // a preset of [ci.presets]
  std::string shard;         // I/N or auto
  std::optional<int> shard_count;
  std::optional<std::uint64_t> seed;  // the seed of every [[op]] that sets none
  bool quick = false, thorough = false, json = false;
};
// Exit 1 when a case failed, 2 when an entry could not run.
int run_ci(const CiOptions& o, const DaemonAddress& daemon, std::ostream& out);

// gpuemu report: the stored failures and recent runs.
struct ReportOptions {
  std::string format = "text";  // text | json | junit | sarif | html
  bool format_given = false;    // --format was on the command line (a signed report is JSON unless)
  std::string op;               // only this op
  std::size_t limit = 100;      // at most N failures, newest first
  std::string runs = "ci";      // the run history: ci | daemon | all
  std::size_t runs_limit = 20;  // at most N runs of each history
  std::string output;           // "": `out`
  bool sign = false;            // writes OUTPUT.sig
};
int run_report(const ReportOptions& o, const DaemonAddress& daemon, std::ostream& out);

// gpuemu report merge FILES...: the --json documents of a sharded gpuemu ci as one report.
struct ReportMergeOptions {
  std::vector<std::string> files;
  std::string format = "text";
  bool format_given = false;
  std::string output;
  bool sign = false;
};
// Exit 1 when a merged result failed, 2 when one is an error.
int run_report_merge(const ReportMergeOptions& o, std::ostream& out);

// gpuemu report verify FILE [--key K]: a signed report checked offline.
struct ReportVerifyOptions {
  std::string file;
  std::string key;  // the signer's public key (base64) to pin
  bool json = false;
};
// Exit 1 when the signature does not hold.
int run_report_verify(const ReportVerifyOptions& o, std::ostream& out);

}  // namespace gpuemu::cli
