// Shared plumbing of the `gpuemu` command line: every command family lives in its own
// cmd_<family>.cpp and exposes one register_<family>_commands() that main.cpp calls. Each command
// is a plain options struct (declared in cmd_<family>.hpp, with its defaults) and a run_* function
// that takes it and a stream to print on and returns the exit code; the register_* function only
// binds the flags to a struct it keeps alive with the callback, and calls run_*. Tests call the
// run_* functions without argv (tests/cpp/cli_commands_test.cpp).
//
// Conventions every command follows:
//  - exit code 0: success / every case passed; 1: a verdict failed (a fuzz failure, a lint
//    regression); 2: usage or setup error (unknown op, bad flag value, missing compiler, ...).
//  - errors go to stderr on one line, "gpuemu: error: <message>".
//  - every command that prints results takes --json and then prints one JSON document on stdout.
#pragma once

#include <CLI/CLI.hpp>

#include <gpuemu/engine/fuzz.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <iostream>
#include <string>

namespace gpuemu::cli {

constexpr int k_exit_ok = 0;
constexpr int k_exit_failed = 1;
constexpr int k_exit_usage = 2;

// Where the commands' daemon is: gpuemu's global --daemon ADDR and --token-file FILE (empty:
// $GPUEMU_DAEMON when it is an address, $GPUEMU_TOKEN / $GPUEMU_TOKEN_FILE, else the local socket
// of $GPUEMU_HOME; docs/protocol.md, "Remote clients").
struct DaemonAddress {
  std::string url, token_file;
};

// What main() owns for the commands: the global flags, and the exit code a command's callback
// writes. Each command is an options struct (cmd_<family>.hpp) bound to its flags by its
// register_* function and run by its run_* function, which tests call without argv.
struct CliContext {
  int exit_code = k_exit_ok;
  DaemonAddress daemon;
};

// Prints "gpuemu: error: <message>" on stderr and returns k_exit_usage.
inline int print_error(const std::string& message) {
  std::cerr << "gpuemu: error: " << message << "\n";
  return k_exit_usage;
}

void register_ops_commands(CLI::App& app, CliContext& ctx);
void register_lint_commands(CLI::App& app, CliContext& ctx);
void register_fuzz_commands(CLI::App& app, CliContext& ctx);
void register_daemon_commands(CLI::App& app, CliContext& ctx);
void register_failure_commands(CLI::App& app, CliContext& ctx);
void register_coverage_commands(CLI::App& app, CliContext& ctx);
void register_project_commands(CLI::App& app, CliContext& ctx);
void register_lsp_commands(CLI::App& app, CliContext& ctx);
void register_scale_commands(CLI::App& app, CliContext& ctx);
void register_kernelbench_commands(CLI::App& app, CliContext& ctx);  // cmd_kernelbench.cpp

// Parses "D=64,128" into a dim restriction; "name=value" attrs into JSON values.
std::pair<std::string, std::vector<std::int64_t>> parse_dim_restriction(const std::string& text);
std::pair<std::string, nlohmann::json> parse_attr_assignment(const std::string& text);

}  // namespace gpuemu::cli
