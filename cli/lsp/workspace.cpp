#include "lsp/workspace.hpp"

#include "lsp/kernel_locator.hpp"

#include <filesystem>

namespace gpuemu::lsp {
namespace fs = std::filesystem;

bool is_project_file(const std::string& path) {
  return fs::path(path).filename() == "gpuemu.toml";
}

void Workspace::open(const std::string& path, std::string text) {
  std::lock_guard lock(m_mutex);
  m_docs[path] = std::move(text);
}

void Workspace::close(const std::string& path) {
  std::lock_guard lock(m_mutex);
  m_docs.erase(path);
}

bool Workspace::is_open(const std::string& path) const {
  std::lock_guard lock(m_mutex);
  return m_docs.count(path) > 0;
}

std::string Workspace::text(const std::string& path) const {
  {
    std::lock_guard lock(m_mutex);
    auto it = m_docs.find(path);
    if (it != m_docs.end()) return it->second;
  }
  return read_file_text(path);
}

std::string Workspace::config_path() const {
  const std::string root = this->root();
  if (root.empty()) return "";
  std::error_code ec;
  for (fs::path dir = fs::path(root);; dir = dir.parent_path()) {
    if (fs::is_regular_file(dir / "gpuemu.toml", ec)) return (dir / "gpuemu.toml").string();
    if (dir == dir.parent_path() || dir.empty()) return "";
  }
}

Result<project::ProjectConfig> Workspace::config() const {
  const std::string path = config_path();
  if (path.empty())
    return make_error(ErrorCode::not_found, "no gpuemu.toml in the workspace or above it");
  return project::parse_project_config(text(path), path);
}

Result<project::ProjectConfig> Workspace::runnable_config() const {
  GPUEMU_TRY(project::ProjectConfig cfg, config());
  GPUEMU_TRY_STATUS(cli::resolve_torch_ops(cfg));
  return cfg;
}

}  // namespace gpuemu::lsp
