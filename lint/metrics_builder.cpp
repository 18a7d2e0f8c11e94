#include "metrics_builder.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace gpuemu::lint {
namespace {

// Sets `field` from the first source that has a value, recording which one it was.
void take(std::optional<std::int64_t>& field, KernelMetrics& m, const char* metric,
          std::optional<std::int64_t> cubin_value, std::optional<std::int64_t> ptxas_value) {
  if (cubin_value) {
    field = cubin_value;
    m.sources[metric] = "cubin";
  } else if (ptxas_value) {
    field = ptxas_value;
    m.sources[metric] = "ptxas";
  }
}

}  // namespace

std::string demangle(const std::string& symbol) {
  if (symbol.rfind("_Z", 0) != 0) return symbol;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : symbol;
}

KernelMetrics build_metrics(const std::string& name, const std::string& arch, const InputUnit& unit,
                            const KernelSources& src) {
  KernelMetrics m;
  m.name = name;
  m.demangled = demangle(name);
  m.arch = arch;
  m.input = unit.source.string();
  m.input_kind = input_kind_name(unit.kind);
  m.variant = unit.variant;

  const CubinKernel* c = src.cubin;
  const PtxasKernelInfo* p = src.ptxas;
  using Opt = std::optional<std::int64_t>;
  take(m.registers, m, "registers", c ? c->registers : Opt{}, p ? p->registers : Opt{});
  take(m.stack_bytes, m, "stack_bytes", c ? c->frame_bytes : Opt{},
       p ? p->stack_frame_bytes : Opt{});
  take(m.shared_bytes, m, "shared_bytes", c ? Opt{c->shared_bytes} : Opt{},
       p ? p->shared_bytes : Opt{});
  take(m.barriers, m, "barriers", c ? Opt{c->barriers} : Opt{}, p ? p->barriers : Opt{});
  take(m.spill_store_bytes, m, "spill_store_bytes", Opt{}, p ? p->spill_store_bytes : Opt{});
  take(m.spill_load_bytes, m, "spill_load_bytes", Opt{}, p ? p->spill_load_bytes : Opt{});
  if (c) {
    m.instructions = c->instructions;
    m.sass_bytes = c->sass_bytes;
    m.sources["instructions"] = "cubin";
  }
  if (src.function) {
    const PtxFunction& f = *src.function;
    m.ptx_instructions = f.instructions;
    m.local_declared_bytes = f.local_bytes;
    m.ptx_virtual_registers = f.virtual_registers;
    m.mix = f.mix;
    m.sources["mix"] = "ptx";
    if (src.module) {
      if (f.first_loc) m.location = src.module->resolve(*f.first_loc);
      for (const auto& [cls, loc] : f.class_locs)
        if (auto resolved = src.module->resolve(loc)) m.class_locations[cls] = *resolved;
    }
  }
  return m;
}

}  // namespace gpuemu::lint
