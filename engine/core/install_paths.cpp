#include "gpuemu/engine/install_paths.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace gpuemu {
namespace {

std::string find_image_dir() {
  std::error_code ec;
  Dl_info info{};
  // For a shared object dladdr names its file; for the main program glibc gives argv[0], which may
  // be a bare name or relative to a directory the process has since left: then /proc/self/exe.
  if (dladdr(reinterpret_cast<void*>(&find_image_dir), &info) != 0 && info.dli_fname &&
      info.dli_fname[0] == '/') {
    const fs::path p = fs::canonical(info.dli_fname, ec);
    if (!ec && fs::is_regular_file(p, ec)) return p.parent_path().string();
  }
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.parent_path().string();
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

}  // namespace

std::string image_dir() {
  static const std::string dir = find_image_dir();
  return dir;
}

std::string installed_data_dir() {
  static const std::string dir = [] {
    const std::string img = image_dir();
    if (img.empty()) return std::string();
    for (const fs::path& cand : {fs::path(img) / ".." / "share" / "gpuemu", fs::path(img) / "share" / "gpuemu"})
      if (is_dir(cand / "schemas" / "ops")) return cand.lexically_normal().string();
    return std::string();
  }();
  return dir;
}

std::string builtin_schema_dir() {
  const std::string installed = installed_data_dir();
  return installed.empty() ? std::string(GPUEMU_SOURCE_SCHEMA_DIR) : installed + "/schemas";
}

}  // namespace gpuemu
