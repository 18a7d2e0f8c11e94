// gpuemu: the command line. Each command family registers itself from its cmd_*.cpp.
#include "cli_common.hpp"
#include "daemon_link.hpp"

#include <gpuemu/protocol/client.hpp>
#include <gpuemu/base/error.hpp>
#include <gpuemu/engine/install_paths.hpp>
#include <gpuemu/protocol/protocol.hpp>

namespace {

struct VersionOptions {
  bool json = false;
};

int run_version(const VersionOptions& o, std::ostream& out) {
  const int protocol = gpuemu::protocol::k_protocol_version;
  const std::string schemas = gpuemu::builtin_schema_dir(), daemon = gpuemu::find_daemon_binary();
  if (o.json)
    out << nlohmann::json{{"version", GPUEMU_VERSION_STRING},
                          {"protocol", protocol},
                          {"schemas", schemas},
                          {"daemon", daemon}}
               .dump(2)
        << "\n";
  else
    out << "gpuemu " << GPUEMU_VERSION_STRING << " (protocol " << protocol << ")\n"
        << "  schemas: " << schemas << "\n  daemon:  " << (daemon.empty() ? "not found" : daemon)
        << "\n";
  return gpuemu::cli::k_exit_ok;
}

void register_version_command(CLI::App& app, gpuemu::cli::CliContext& ctx) {
  auto* version = app.add_subcommand(
      "version", "Print gpuemu's version, the protocol's, and where its schemas and daemon are");
  auto o = std::make_shared<VersionOptions>();
  version->add_flag("--json", o->json, "JSON output");
  version->callback([&ctx, o] { ctx.exit_code = run_version(*o, std::cout); });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpuemu::cli;
  CLI::App app{"gpuemu: catches GPU kernels that are silently wrong", "gpuemu"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("gpuemu ") + GPUEMU_VERSION_STRING);
  CliContext ctx;
  app.add_option("--daemon", ctx.daemon.url,
                 "the daemon to use: tcp://HOST:PORT or tls+tcp://HOST:PORT (a daemon started with "
                 "--tcp), or ipc://PATH (default: $GPUEMU_DAEMON when it is an address, else the "
                 "local daemon of $GPUEMU_HOME)");
  app.add_option("--token-file", ctx.daemon.token_file,
                 "a file whose first line is a tcp daemon's token (default: $GPUEMU_TOKEN, "
                 "$GPUEMU_TOKEN_FILE)");
  register_ops_commands(app, ctx);
  register_fuzz_commands(app, ctx);
  register_lint_commands(app, ctx);
  register_daemon_commands(app, ctx);
  register_failure_commands(app, ctx);
  register_coverage_commands(app, ctx);
  register_project_commands(app, ctx);
  register_lsp_commands(app, ctx);
  register_scale_commands(app, ctx);
  register_kernelbench_commands(app, ctx);
  register_version_command(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "gpuemu: error: " << e.what() << "\n";
    return k_exit_usage;
  } catch (const gpuemu::GpuemuException& e) {
    return print_error(e.error().message);
  } catch (const std::exception& e) {
    return print_error(e.what());
  }
  return ctx.exit_code;
}
