// gpuemu: the command line. Each command family registers itself from its cmd_*.cpp.
#include "cli_common.hpp"

#include <gpuemu/error.hpp>

int main(int argc, char** argv) {
  using namespace gpuemu::cli;
  CLI::App app{"gpuemu: catches GPU kernels that are silently wrong", "gpuemu"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("gpuemu ") + GPUEMU_VERSION_STRING);
  CliContext ctx;
  register_ops_commands(app, ctx);
  register_fuzz_commands(app, ctx);
  register_lint_commands(app, ctx);
  register_daemon_commands(app, ctx);
  register_failure_commands(app, ctx);
  register_coverage_commands(app, ctx);
  register_project_commands(app, ctx);
  register_lsp_commands(app, ctx);
  auto* version = app.add_subcommand("version", "Print gpuemu's version (and the protocol's)");
  static bool version_json = false;
  version->add_flag("--json", version_json, "JSON output");
  version->callback([] {
    if (version_json)
      std::cout << nlohmann::json{{"version", GPUEMU_VERSION_STRING}, {"protocol", 1}}.dump(2)
                << "\n";
    else
      std::cout << "gpuemu " << GPUEMU_VERSION_STRING << " (protocol 1)\n";
  });
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
