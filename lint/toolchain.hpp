// Internal: finding and driving the CUDA tools (nvcc, ptxas, and the optional cuobjdump/nvdisasm).
// Tools are looked up in $CUDA_HOME/bin, /usr/local/cuda/bin, then PATH, unless the request names
// its own directories. Failures are one-line errors quoting the tool's first error line.
#pragma once

#include "gpuemu/base/error.hpp"
#include "ptxas_output.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::lint {

// "sm_90", "sm90", "90", "sm_90a" -> "sm_90" / "sm_90a"; anything else is invalid_argument.
Result<std::string> normalize_arch(const std::string& text);

class Toolchain {
 public:
  // Empty `dirs`: the default search ($CUDA_HOME/bin, /usr/local/cuda/bin, PATH).
  explicit Toolchain(const std::vector<std::filesystem::path>& dirs);

  const std::filesystem::path& nvcc() const { return m_nvcc; }
  const std::filesystem::path& ptxas() const { return m_ptxas; }
  const std::filesystem::path& disassembler() const { return m_disassembler; }
  std::string searched() const;  // for "not found" messages

  // tool_missing errors naming the tool and where it was looked for.
  Status require_nvcc() const;
  Status require_ptxas() const;

  // "13.0.88" from `ptxas --version`.
  Result<std::string> ptxas_version();
  // invalid_argument "unknown arch" when ptxas does not list `arch` among its targets.
  Status check_arch(const std::string& arch);

  // nvcc -ptx for one arch; returns the PTX file written into `out_dir`.
  Result<std::filesystem::path> compile_cu(const std::filesystem::path& cu, const std::string& arch,
                                           const std::vector<std::string>& flags, bool line_info,
                                           const std::filesystem::path& out_dir);
  // ptxas -v: writes `cubin` and returns what -v reported per entry function.
  Result<std::map<std::string, PtxasKernelInfo>> assemble(const std::filesystem::path& ptx,
                                                          const std::string& arch,
                                                          const std::filesystem::path& cubin);
  // `cuobjdump -sass` (or nvdisasm) listing of a cubin.
  Result<std::string> disassemble(const std::filesystem::path& cubin);

 private:
  std::vector<std::filesystem::path> m_dirs;
  std::filesystem::path m_nvcc, m_ptxas, m_disassembler;
  bool m_disassembler_is_cuobjdump = false;
  std::optional<std::vector<std::string>> m_arches;  // from `ptxas --help`, cached
};

}  // namespace gpuemu::lint
