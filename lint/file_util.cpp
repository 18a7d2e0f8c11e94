#include "file_util.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>

extern char** environ;

namespace gpuemu::lint {
namespace fs = std::filesystem;

namespace {

Error io_error(const fs::path& path, const std::string& what) {
  return make_error(ErrorCode::io_error, path.string() + ": " + what);
}

}  // namespace

Result<std::vector<std::uint8_t>> read_file_bytes(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return make_error(ErrorCode::not_found, path.string() + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path, "cannot open: " + std::string(std::strerror(errno)));
  std::vector<std::uint8_t> bytes;
  char buffer[65536];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
    bytes.insert(bytes.end(), buffer, buffer + in.gcount());
  if (in.bad()) return io_error(path, "read failed");
  return bytes;
}

Result<std::string> read_text_file(const fs::path& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes) return bytes.error();
  return std::string(bytes->begin(), bytes->end());
}

Status write_file_atomically(const fs::path& path, const std::string& content) {
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(path, "cannot write: " + std::string(std::strerror(errno)));
    out << content;
    if (!out.flush()) return io_error(path, "write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return io_error(path, "cannot write: rename failed");
  }
  return {};
}

Result<TempDir> TempDir::create(const std::string& prefix) {
  std::error_code ec;
  fs::path base = fs::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string templ = (base / (prefix + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr)
    return io_error(templ,
                    "cannot create a temporary directory: " + std::string(std::strerror(errno)));
  return TempDir(fs::path(templ));
}

TempDir::TempDir(TempDir&& other) noexcept : m_path(std::move(other.m_path)) {
  other.m_path.clear();
}

TempDir::~TempDir() {
  if (m_path.empty()) return;
  std::error_code ec;
  fs::remove_all(m_path, ec);
}

Result<ProcessResult> run_process(const std::vector<std::string>& argv) {
  if (argv.empty()) return make_error(ErrorCode::invalid_argument, "empty command");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return io_error(argv[0], "pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return io_error(argv[0], "cannot run: " + std::string(std::strerror(rc)));
  }
  ProcessResult result;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n > 0)
      result.output.append(buffer, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace gpuemu::lint
