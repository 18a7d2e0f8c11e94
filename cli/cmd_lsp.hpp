// gpuemu lsp: the options struct and the run function; register_lsp_commands binds the flags.
#pragma once

#include "cli_common.hpp"
#include "lsp/lsp_server.hpp"

namespace gpuemu::cli {

struct LspCommandOptions {
  lsp::ServerOptions server;
  bool stdio = true;  // --stdio: the default and only transport
};

// Serves the language server on stdin/stdout until the client exits; returns its exit code.
int run_lsp(const LspCommandOptions& o);

}  // namespace gpuemu::cli
