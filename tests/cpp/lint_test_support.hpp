// Shared helpers of the lint tests (lint_*_test.cpp): fixture paths, reading files, and running
// the CUDA tools the way a user would, to compare the lint's figures with the tools' own text.
#pragma once

#include "lint/file_util.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace gpuemu::lint::testing {

// GPUEMU_SOURCE_DIR in the environment overrides the build's, for a test binary run elsewhere
// (the GPU machine, which has cuobjdump/nvdisasm).
inline std::filesystem::path lint_data_dir() {
  const char* env = std::getenv("GPUEMU_SOURCE_DIR");
  std::filesystem::path root = env != nullptr && *env != '\0' ? env : GPUEMU_SOURCE_DIR;
  return root / "tests" / "data" / "lint";
}

inline std::string read_fixture_text(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  EXPECT_TRUE(text.ok()) << path;
  return text.ok() ? *text : std::string{};
}

inline std::vector<std::uint8_t> read_fixture_bytes(const std::filesystem::path& path) {
  auto bytes = read_file_bytes(path);
  EXPECT_TRUE(bytes.ok()) << path;
  return bytes.ok() ? *bytes : std::vector<std::uint8_t>{};
}

// A CUDA tool from $CUDA_HOME/bin, /usr/local/cuda/bin or PATH; empty when absent.
inline std::filesystem::path find_cuda_tool(const std::string& name) {
  std::vector<std::filesystem::path> dirs;
  if (const char* home = std::getenv("CUDA_HOME"))
    dirs.push_back(std::filesystem::path(home) / "bin");
  dirs.emplace_back("/usr/local/cuda/bin");
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (std::size_t start = 0, colon; start <= p.size(); start = colon + 1) {
      colon = p.find(':', start);
      if (colon == std::string::npos) colon = p.size();
      if (colon > start) dirs.emplace_back(p.substr(start, colon - start));
    }
  }
  for (const auto& dir : dirs) {
    auto candidate = dir / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// Runs a command and returns its combined output; fails the test when it does not exit 0.
inline std::string run_ok(const std::vector<std::string>& argv) {
  auto result = run_process(argv);
  EXPECT_TRUE(result.ok());
  if (!result.ok()) return {};
  EXPECT_EQ(result->exit_code, 0) << argv[0] << ": " << result->output;
  return result->output;
}

// nvcc -ptx -lineinfo of a fixture, cached across test processes (ctest runs every test in its own
// process, and nvcc takes about a second per file): the cache key hashes the source, the .cuh
// headers beside it, the arch, the flags and the nvcc binary's timestamp. Returns "" on failure.
inline std::filesystem::path cached_ptx(const std::filesystem::path& nvcc,
                                        const std::filesystem::path& source,
                                        const std::string& arch) {
  namespace fs = std::filesystem;
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  auto mix = [&](const std::string& bytes) {
    for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ULL;
  };
  mix(read_fixture_text(source));
  std::error_code ec;
  std::vector<fs::path> headers;
  for (const auto& entry : fs::directory_iterator(source.parent_path(), ec))
    if (entry.path().extension() == ".cuh") headers.push_back(entry.path());
  std::sort(headers.begin(), headers.end());
  for (const auto& h : headers) mix(h.filename().string() + read_fixture_text(h));
  mix(arch + "|-lineinfo|" + nvcc.string() +
      std::to_string(fs::last_write_time(nvcc, ec).time_since_epoch().count()));
  fs::path dir = fs::temp_directory_path(ec) / "gpuemu-lint-test-cache";
  fs::create_directories(dir, ec);
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(hash));
  fs::path ptx = dir / (source.stem().string() + "." + arch + "." + name + ".ptx");
  if (fs::exists(ptx, ec)) return ptx;
  fs::path tmp = ptx;
  tmp += ".tmp" + std::to_string(::getpid());
  run_ok(
      {nvcc.string(), "-ptx", "-lineinfo", "-arch=" + arch, source.string(), "-o", tmp.string()});
  fs::rename(tmp, ptx, ec);  // atomic: a concurrent process may have won the race, same content
  return ec ? fs::path{} : ptx;
}

// The line number of the first line of `text` containing `marker`, 0 when none.
inline int line_of(const std::string& text, const std::string& marker) {
  int line = 1;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.substr(start, end - start).find(marker) != std::string::npos) return line;
    ++line;
    start = end + 1;
  }
  return 0;
}

}  // namespace gpuemu::lint::testing
