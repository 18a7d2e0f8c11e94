// gpuemu lsp: the language server (cli/lsp/, docs/editors.md) on stdin/stdout.
#include "cmd_lsp.hpp"

#include <cstdio>

namespace gpuemu::cli {

int run_lsp(const LspCommandOptions& o) {
  lsp::JsonRpcTransport transport(stdin, stdout);
  lsp::LspServer server(transport, o.server);
  return server.run();
}

void register_lsp_commands(CLI::App& app, CliContext& ctx) {
  auto* lsp = app.add_subcommand(
      "lsp",
      "The language server (JSON-RPC over stdio) for editors: failures as diagnostics, "
      "code actions, gpuemu.toml support");
  auto o = std::make_shared<LspCommandOptions>();
  lsp->add_option("--home", o->server.home,
                  "GPUEMU_HOME of the daemon (default: the environment's)");
  lsp->add_option("--python", o->server.python,
                  "the Python that runs repro scripts of client-side kernels (default python3)");
  lsp->add_option("--poll-ms", o->server.poll_ms, "how often to ask the daemon for changes (ms)")
      ->check(CLI::Range(50, 600000));
  lsp->add_option("--daemon", o->server.daemon_path, "the gpuemu-daemon to start when none runs");
  lsp->add_flag("--stdio", o->stdio, "talk over stdin/stdout (the default and only transport)");
  lsp->callback([&ctx, o] { ctx.exit_code = run_lsp(*o); });
}

}  // namespace gpuemu::cli
