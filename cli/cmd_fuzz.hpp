// gpuemu fuzz and gpuemu calibrate: the options structs and run functions; register_fuzz_commands
// binds the flags. Each run_* prints on `out`, returns the exit code and throws GpuemuException on
// an error; through the daemon it talks to the one at `daemon`.
#pragma once

#include "case_flags.hpp"
#include "cli_common.hpp"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpuemu::cli {

// gpuemu fuzz OP (--kernel NAME | --script FILE.py:FUNC) [...]
struct FuzzCommandOptions {
  std::string op;
  std::string kernel;               // a built-in emulated kernel of the op
  std::string script;               // FILE.py:FUNC
  std::string framework = "numpy";  // what --script's function receives: numpy | torch
  std::string python;               // interpreter for --script ("" : the project's .venv)
  double script_timeout_s = 60.0;   // per case
  bool no_daemon = false;           // run the engine in this process
  std::int64_t iterations = 100;
  std::optional<std::uint64_t> seed;  // random when absent (printed)
  std::int64_t only_case = -1;        // --case I: replay only case I of the run, in this process
  CaseFlags flags;
  bool fail_fast = false;
  bool minimize = true;  // minimise the first failure
  bool json = false;
  std::vector<std::string> envelope;  // X or DTYPE=X (through the daemon)
  std::string config;                 // gpuemu.toml holding OP when it is a custom op
};
// Exit 1 when a case failed.
int run_fuzz(const FuzzCommandOptions& o, const DaemonAddress& daemon, std::ostream& out);

// gpuemu calibrate [OP...] [...]
struct CalibrateOptions {
  std::vector<std::string> ops;     // default: every op
  std::vector<std::string> dtypes;  // default: each the op allows
  std::int64_t cases = 200;         // per (op, dtype)
  std::uint64_t seed = 0xC0FFEE;
  std::string write_path;  // write the envelope table here
  bool json = false;
  bool no_daemon = false;  // calibrate in this process (nothing applied or stored)
  std::string config;      // gpuemu.toml with the custom ops (default: the nearest)
};
int run_calibrate(const CalibrateOptions& o, const DaemonAddress& daemon, std::ostream& out);

}  // namespace gpuemu::cli
