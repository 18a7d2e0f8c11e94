// Internal: merging what the PTX, ptxas -v and the cubin say about one kernel into KernelMetrics.
// The cubin wins for hardware resources (it is what runs); ptxas supplies spills, and the
// resources when there is no cubin; the PTX supplies the instruction mix and line info.
#pragma once

#include "cubin_reader.hpp"
#include "gpuemu/lint/metrics.hpp"
#include "input_discovery.hpp"
#include "ptx_parser.hpp"
#include "ptxas_output.hpp"

#include <string>

namespace gpuemu::lint {

struct KernelSources {
  const PtxModule* module = nullptr;
  const PtxFunction* function = nullptr;
  const PtxasKernelInfo* ptxas = nullptr;
  const CubinKernel* cubin = nullptr;
};

KernelMetrics build_metrics(const std::string& name, const std::string& arch, const InputUnit& unit,
                            const KernelSources& sources);

// The C++ demangling of a symbol; the symbol itself when it is not a mangled name.
std::string demangle(const std::string& symbol);

}  // namespace gpuemu::lint
