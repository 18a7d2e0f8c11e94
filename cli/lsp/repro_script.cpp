#include "lsp/repro_script.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuemu::lsp {
namespace fs = std::filesystem;

namespace {

// A Python string literal (JSON's escaping is valid Python for these texts).
std::string py(const std::string& s) {
  return Json(s).dump();
}

}  // namespace

Result<ReproScript> write_repro_script(const Json& record, const std::vector<std::string>& inputs,
                                       const std::string& home) {
  const std::string id = record.value("id", "");
  const Json kernel = record.value("kernel", Json::object());
  const std::string file = kernel.value("file", "");
  const std::string name = kernel.value("name", "");
  if (id.empty() || file.empty() || name.empty())
    return make_error(ErrorCode::invalid_argument,
                      "failure " + id + " does not name its kernel's file and function");
  std::string framework = kernel.value("framework", "numpy");
  std::string args;
  Json names = Json::array();
  for (const auto& n : inputs) {
    args += (args.empty() ? "" : ", ") + n;
    names.push_back(n);
  }
  std::ostringstream os;
  os << "#!/usr/bin/env python3\n"
     << "\"\"\"Reproduces gpuemu failure " << id << " (" << record.value("op", "") << ", "
     << record.value("dtype", "") << ", seed " << record.value("seed", Json()).dump() << ").\n\n"
     << "Written by `gpuemu lsp` (\"Reproduce failure\"). Run it with the Python that has gpuemu:\n"
     << "    python "
     << "gpuemu_repro_" << id << ".py              # replay the stored case\n"
     << "    python "
     << "gpuemu_repro_" << id << ".py --minimize   # shrink it\n"
     << "The kernel is called as " << name << "(" << args << "); edit run_op if yours differs.\n"
     << "\"\"\"\n"
     << "import importlib.util\nimport json\nimport os\nimport sys\n\n"
     << "FAILURE_ID = " << py(id) << "\n"
     << "KERNEL_FILE = " << py(file) << "\n"
     << "KERNEL_NAME = " << py(name) << "\n"
     << "INPUTS = " << names.dump() << "\n"
     << "FRAMEWORK = " << py(framework) << "\n"
     << "os.environ.setdefault(\"GPUEMU_HOME\", " << py(home) << ")\n\n"
     << "import gpuemu  # noqa: E402\n\n\n"
     << "def load_kernel():\n"
     << "    sys.path.insert(0, os.path.dirname(KERNEL_FILE))\n"
     << "    spec = importlib.util.spec_from_file_location(\"_gpuemu_repro_kernel\", KERNEL_FILE)\n"
     << "    module = importlib.util.module_from_spec(spec)\n"
     << "    spec.loader.exec_module(module)\n"
     << "    obj = module\n"
     << "    for part in KERNEL_NAME.split(\".\"):\n"
     << "        obj = getattr(obj, part)\n"
     << "    return obj\n\n\n"
     << "def run_op(inputs):\n"
     << "    return KERNEL(*[inputs[n] for n in INPUTS])\n\n\n"
     << "def main():\n"
     << "    client = gpuemu.Client()\n"
     << "    if \"--minimize\" in sys.argv[1:]:\n"
     << "        result = client.minimize(FAILURE_ID, run_op=run_op, framework=FRAMEWORK)\n"
     << "    else:\n"
     << "        result = client.reproduce(FAILURE_ID, run_op=run_op, framework=FRAMEWORK)\n"
     << "        result.pop(\"case\", None)\n"
     << "    print(json.dumps(result, default=str))\n\n\n"
     << "KERNEL = load_kernel()\n"
     << "if __name__ == \"__main__\":\n"
     << "    main()\n";
  ReproScript s;
  s.path = (fs::path(file).parent_path() / ("gpuemu_repro_" + id + ".py")).string();
  s.text = os.str();
  std::ofstream out(s.path, std::ios::trunc);
  out << s.text;
  out.close();
  if (!out) return make_error(ErrorCode::io_error, "cannot write " + s.path);
  return s;
}

Result<Json> run_repro_script(const std::string& python, const std::string& script,
                              const std::vector<std::string>& args, const std::string& home,
                              int timeout_s) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0)
    return make_error(ErrorCode::io_error, "cannot create pipes for " + python);
  const pid_t pid = fork();
  if (pid < 0) return make_error(ErrorCode::io_error, "cannot fork " + python);
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (!home.empty()) setenv("GPUEMU_HOME", home.c_str(), 1);
    std::vector<std::string> argv_s = {python, script};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(python.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s\n", python.c_str());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  std::string out, err;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 1000))) < 0) break;
    for (auto& f : fds) {
      if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = ::read(f.fd, buf, sizeof buf);
      if (n <= 0) {
        close(f.fd);
        f.fd = -1;
        --open_fds;
      } else {
        (f.fd == out_pipe[0] ? out : err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out)
    return make_error(ErrorCode::timeout,
                      script + " did not finish in " + std::to_string(timeout_s) + " s");
  const std::string tail = err.size() > 1500 ? err.substr(err.size() - 1500) : err;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return make_error(ErrorCode::internal, python + " " + script + " failed: " + tail);
  std::string last;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) last = l;
  try {
    return Json::parse(last);
  } catch (const Json::exception&) {
    return make_error(ErrorCode::internal, script + " printed no JSON result: " + tail);
  }
}

}  // namespace gpuemu::lsp
