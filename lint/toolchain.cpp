#include "toolchain.hpp"

#include "file_util.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace gpuemu::lint {
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> default_dirs() {
  std::vector<fs::path> candidates;
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0')
    candidates.push_back(fs::path(home) / "bin");
  candidates.emplace_back("/usr/local/cuda/bin");
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (std::size_t start = 0; start <= p.size();) {
      std::size_t colon = p.find(':', start);
      if (colon == std::string::npos) colon = p.size();
      if (colon > start) candidates.emplace_back(p.substr(start, colon - start));
      start = colon + 1;
    }
  }
  std::vector<fs::path> dirs;  // first occurrence of each
  for (const fs::path& d : candidates)
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  return dirs;
}

fs::path find_in(const std::vector<fs::path>& dirs, const std::string& tool) {
  for (const fs::path& dir : dirs) {
    fs::path candidate = dir / tool;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return {};
}

// The tool's most telling output line: the first mentioning "error" or "fatal", else the first.
std::string first_error_line(const std::string& output) {
  std::string first, found;
  std::size_t start = 0;
  while (start < output.size() && found.empty()) {
    std::size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (first.empty()) first = line;
    if (line.find("error") != std::string::npos || line.find("fatal") != std::string::npos)
      found = line;
  }
  std::string line = found.empty() ? first : found;
  line.erase(0, line.find_first_not_of(" \t"));
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line.empty() ? "(no output)" : line;
}

Error tool_failed(const std::string& what, const ProcessResult& r) {
  return make_error(
      ErrorCode::invalid_argument,
      what + " failed (exit " + std::to_string(r.exit_code) + "): " + first_error_line(r.output));
}

}  // namespace

Result<std::string> normalize_arch(const std::string& text) {
  std::string digits = text;
  if (digits.rfind("sm_", 0) == 0)
    digits = digits.substr(3);
  else if (digits.rfind("sm", 0) == 0)
    digits = digits.substr(2);
  std::string suffix;
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f'))
    suffix = digits.back(), digits.pop_back();
  bool numeric = !digits.empty() && digits.size() <= 3 &&
                 std::all_of(digits.begin(), digits.end(),
                             [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!numeric)
    return make_error(ErrorCode::invalid_argument,
                      "unknown arch '" + text + "' (expected sm_XY, e.g. sm_80 or sm_90a)");
  return "sm_" + digits + suffix;
}

Toolchain::Toolchain(const std::vector<fs::path>& dirs)
    : m_dirs(dirs.empty() ? default_dirs() : dirs) {
  m_nvcc = find_in(m_dirs, "nvcc");
  m_ptxas = find_in(m_dirs, "ptxas");
  m_disassembler = find_in(m_dirs, "cuobjdump");
  m_disassembler_is_cuobjdump = !m_disassembler.empty();
  if (m_disassembler.empty()) m_disassembler = find_in(m_dirs, "nvdisasm");
}

std::string Toolchain::searched() const {
  std::string out;
  for (const fs::path& d : m_dirs) out += (out.empty() ? "" : ":") + d.string();
  return out;
}

Status Toolchain::require_nvcc() const {
  if (!m_nvcc.empty()) return {};
  return make_error(ErrorCode::tool_missing, "nvcc not found (searched " + searched() +
                                                 "); install the CUDA toolkit or set CUDA_HOME");
}

Status Toolchain::require_ptxas() const {
  if (!m_ptxas.empty()) return {};
  return make_error(ErrorCode::tool_missing, "ptxas not found (searched " + searched() +
                                                 "); install the CUDA toolkit or set CUDA_HOME");
}

Result<std::string> Toolchain::ptxas_version() {
  if (Status st = require_ptxas(); !st) return st.error();
  auto run = run_process({m_ptxas.string(), "--version"});
  if (!run) return run.error();
  if (run->exit_code != 0) return tool_failed("ptxas --version", *run);
  return parse_tool_version(run->output);
}

Status Toolchain::check_arch(const std::string& arch) {
  if (Status st = require_ptxas(); !st) return st;
  if (!m_arches) {
    auto run = run_process({m_ptxas.string(), "--help"});
    if (!run) return run.error();
    std::vector<std::string> arches;
    const std::string& text = run->output;
    for (std::size_t at = text.find("'sm_"); at != std::string::npos;
         at = text.find("'sm_", at + 1)) {
      std::size_t close = text.find('\'', at + 1);
      if (close != std::string::npos) arches.push_back(text.substr(at + 1, close - at - 1));
    }
    m_arches = arches;
  }
  if (m_arches->empty() || std::find(m_arches->begin(), m_arches->end(), arch) != m_arches->end())
    return {};
  std::string known;
  for (const std::string& a : *m_arches) known += (known.empty() ? "" : ", ") + a;
  return make_error(ErrorCode::invalid_argument,
                    "unknown arch '" + arch + "' (this ptxas supports " + known + ")");
}

Result<fs::path> Toolchain::compile_cu(const fs::path& cu, const std::string& arch,
                                       const std::vector<std::string>& flags, bool line_info,
                                       const fs::path& out_dir) {
  if (Status st = require_nvcc(); !st) return st.error();
  fs::path ptx = out_dir / (cu.stem().string() + "." + arch + ".ptx");
  std::vector<std::string> argv = {m_nvcc.string(), "-ptx", "-arch=" + arch};
  if (line_info) argv.push_back("-lineinfo");
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {cu.string(), "-o", ptx.string()});
  auto run = run_process(argv);
  if (!run) return run.error();
  if (run->exit_code != 0) return tool_failed("nvcc on " + cu.string() + " for " + arch, *run);
  return ptx;
}

Result<std::map<std::string, PtxasKernelInfo>> Toolchain::assemble(const fs::path& ptx,
                                                                   const std::string& arch,
                                                                   const fs::path& cubin) {
  if (Status st = require_ptxas(); !st) return st.error();
  auto run =
      run_process({m_ptxas.string(), "-v", "-arch=" + arch, ptx.string(), "-o", cubin.string()});
  if (!run) return run.error();
  if (run->exit_code != 0) return tool_failed("ptxas on " + ptx.string() + " for " + arch, *run);
  return parse_ptxas_output(run->output);
}

Result<std::string> Toolchain::disassemble(const fs::path& cubin) {
  if (m_disassembler.empty())
    return make_error(ErrorCode::tool_missing, "neither cuobjdump nor nvdisasm found");
  std::vector<std::string> argv = {m_disassembler.string()};
  if (m_disassembler_is_cuobjdump) argv.push_back("-sass");
  argv.push_back(cubin.string());
  auto run = run_process(argv);
  if (!run) return run.error();
  std::string tool = m_disassembler.filename().string();
  if (run->exit_code != 0) return tool_failed(tool + " on " + cubin.string(), *run);
  return std::move(run->output);
}

}  // namespace gpuemu::lint
