// `gpuemu kernelbench`: judges KernelBench candidates against their problems. Problems, references
// and candidates are PyTorch code, so the judge is gpuemu's Python module (gpuemu.kernelbench, in
// process with the engine); this command finds the interpreter and the module as script kernels
// do (GPUEMU_PYTHON, the tree's .venv, the wheel's interpreter) and hands it every argument, so
// that its flags, output and exit status are the module's (docs/kernelbench.md).
#include "cmd_kernelbench.hpp"

#include "gpuemu/script/script_kernel.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace gpuemu::cli {

int run_kernelbench(const KernelbenchOptions& o) {
  auto runner = script::locate_script_runner();
  if (!runner) return print_error(runner.error().message);
  const std::string python = script::default_script_python(*runner);
  const std::filesystem::path package_dir =
      std::filesystem::path(*runner).parent_path().parent_path();
  std::string path = package_dir.string();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += std::string(":") + old;
  ::setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<std::string> args = {python, "-m", "gpuemu.kernelbench"};
  args.insert(args.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  return print_error("cannot run " + python + " for `gpuemu kernelbench`: " + std::strerror(errno) +
                     " (set GPUEMU_PYTHON to an interpreter with torch)");
}

void register_kernelbench_commands(CLI::App& app, CliContext& ctx) {
  auto* kb = app.add_subcommand(
      "kernelbench",
      "Judge KernelBench candidates (ModelNew) against their problems (Model): PROBLEM CANDIDATE "
      "[--dtype D] [--cases N] [--json]; directories judge every pair (`gpuemu kernelbench --help`)");
  kb->prefix_command();  // every argument, --help included, goes to the judge
  kb->set_help_flag();
  kb->callback([&ctx, kb] { ctx.exit_code = run_kernelbench({kb->remaining()}); });
}

}  // namespace gpuemu::cli
