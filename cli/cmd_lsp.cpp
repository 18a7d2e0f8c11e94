// gpuemu lsp: the language server (cli/lsp/, docs/editors.md) on stdin/stdout.
#include "cli_common.hpp"
#include "lsp/lsp_server.hpp"

#include <cstdio>

namespace gpuemu::cli {

void register_lsp_commands(CLI::App& app, CliContext& ctx) {
  auto* lsp = app.add_subcommand(
      "lsp",
      "The language server (JSON-RPC over stdio) for editors: failures as diagnostics, "
      "code actions, gpuemu.toml support");
  static lsp::ServerOptions options;
  static bool stdio = true;
  lsp->add_option("--home", options.home, "GPUEMU_HOME of the daemon (default: the environment's)");
  lsp->add_option("--python", options.python,
                  "the Python that runs repro scripts of client-side kernels (default python3)");
  lsp->add_option("--poll-ms", options.poll_ms, "how often to ask the daemon for changes (ms)")
      ->check(CLI::Range(50, 600000));
  lsp->add_option("--daemon", options.daemon_path, "the gpuemu-daemon to start when none runs");
  lsp->add_flag("--stdio", stdio, "talk over stdin/stdout (the default and only transport)");
  lsp->callback([&ctx] {
    lsp::JsonRpcTransport transport(stdin, stdout);
    lsp::LspServer server(transport, options);
    ctx.exit_code = server.run();
  });
}

}  // namespace gpuemu::cli
