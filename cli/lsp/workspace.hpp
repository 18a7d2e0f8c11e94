// What the language server knows of the editor's workspace: the open documents (their current
// text, which may differ from the disk) and the project's gpuemu.toml (found at the root, or the
// first one above it), parsed by the same reader as `gpuemu ci`.
#pragma once

#include "gpuemu/project/project_loader.hpp"

#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace gpuemu::lsp {

class Workspace {
 public:
  void set_root(const std::string& root_path) {
    std::lock_guard lock(m_mutex);
    m_root = root_path;
  }
  std::string root() const {
    std::lock_guard lock(m_mutex);
    return m_root;
  }

  void open(const std::string& path, std::string text);
  void close(const std::string& path);
  // The open document's text, else the file's on disk ("" when unreadable).
  std::string text(const std::string& path) const;
  bool is_open(const std::string& path) const;

  // The gpuemu.toml of the workspace: its path ("" when none), and its parse (the error of the
  // last read when it does not parse; the text read is the open document's when it is open).
  std::string config_path() const;
  Result<project::ProjectConfig> config() const;
  // config() with every `torch_op =` custom op's schema read from Python (cli::resolve_torch_ops):
  // what running ops needs; diagnostics and completion use config(), which runs no user code.
  Result<project::ProjectConfig> runnable_config() const;

 private:
  mutable std::mutex m_mutex;
  std::string m_root;
  std::map<std::string, std::string> m_docs;
};

// Whether `path` is a gpuemu.toml (by its file name).
bool is_project_file(const std::string& path);

}  // namespace gpuemu::lsp
