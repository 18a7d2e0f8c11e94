// Internal: file and process helpers for the lint (reading inputs, temporary directories, running
// the CUDA tools without a shell).
#pragma once

#include "gpuemu/base/error.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gpuemu::lint {

Result<std::vector<std::uint8_t>> read_file_bytes(const std::filesystem::path& path);
Result<std::string> read_text_file(const std::filesystem::path& path);
// Writes through a sibling temporary file renamed over `path`.
Status write_file_atomically(const std::filesystem::path& path, const std::string& content);

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  static Result<TempDir> create(const std::string& prefix);
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  ~TempDir();
  const std::filesystem::path& path() const { return m_path; }

 private:
  explicit TempDir(std::filesystem::path path) : m_path(std::move(path)) {}
  std::filesystem::path m_path;
};

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] (a path) with the arguments, no shell; io_error when it cannot be started.
Result<ProcessResult> run_process(const std::vector<std::string>& argv);

}  // namespace gpuemu::lint
