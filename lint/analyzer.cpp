#include "gpuemu/lint/analyzer.hpp"

#include "cubin_reader.hpp"
#include "file_util.hpp"
#include "input_discovery.hpp"
#include "metrics_builder.hpp"
#include "ptx_parser.hpp"
#include "sass_listing.hpp"
#include "toolchain.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

namespace gpuemu::lint {
namespace fs = std::filesystem;

namespace {

// One analysed (unit, arch): the kernels found and the cubin they live in (for disassembly).
struct Compiled {
  std::vector<KernelMetrics> kernels;
  fs::path cubin;
};

Error with_path(const fs::path& path, const Error& e) {
  return make_error(e.code, path.string() + ": " + e.message);
}

Result<PtxModule> load_ptx(const fs::path& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  auto module = parse_ptx(*text);
  if (!module) return with_path(path, module.error());
  return module;
}

template <typename T>
const T* find_named(const std::map<std::string, T>& map, const std::string& name) {
  auto it = map.find(name);
  return it == map.end() ? nullptr : &it->second;
}

const CubinKernel* find_cubin_kernel(const CubinInfo& cubin, const std::string& name) {
  for (const CubinKernel& k : cubin.kernels)
    if (k.name == name) return &k;
  return nullptr;
}

class Analysis {
 public:
  Analysis(const LintRequest& request, std::vector<std::string> arches, TempDir tmp)
      : m_request(request),
        m_arches(std::move(arches)),
        m_tools(request.tool_dirs),
        m_tmp(std::move(tmp)) {}

  Toolchain& tools() { return m_tools; }
  std::vector<std::string>& notes() { return m_notes; }

  // PTX (given, compiled from .cu, or from a Triton cache) through ptxas for one arch, plus the
  // existing cubin when the unit has one (Triton); kernels are the PTX's entries.
  Result<Compiled> from_ptx(const InputUnit& unit, const PtxModule& module, const fs::path& ptx,
                            const std::string& arch, const fs::path& dir) {
    if (Status st = m_tools.check_arch(arch); !st) return st.error();
    Compiled out;
    fs::path assembled = dir / (ptx.stem().string() + "." + arch + ".cubin");
    out.cubin = unit.cubin.empty() ? assembled : unit.cubin;  // Triton's own cubin is what runs
    auto ptxas = m_tools.assemble(ptx, arch, assembled);
    if (!ptxas) return ptxas.error();
    auto cubin = read_cubin_file(out.cubin);
    if (!cubin) return cubin.error();
    std::string kernel_arch = unit.cubin.empty() ? arch : cubin->arch;
    for (const PtxFunction& f : module.functions) {
      if (!f.is_entry) continue;
      KernelSources src{&module, &f, find_named(*ptxas, f.name), find_cubin_kernel(*cubin, f.name)};
      out.kernels.push_back(build_metrics(f.name, kernel_arch, unit, src));
    }
    return out;
  }

  Result<Compiled> from_cubin(const InputUnit& unit) {
    auto cubin = read_cubin_file(unit.cubin);
    if (!cubin) return cubin.error();
    m_notes.push_back(unit.cubin.string() +
                      ": a cubin records no spill counts; lint its .ptx or .cu for spills");
    Compiled out;
    out.cubin = unit.cubin;
    for (const CubinKernel& k : cubin->kernels)
      out.kernels.push_back(
          build_metrics(k.name, cubin->arch, unit, KernelSources{nullptr, nullptr, nullptr, &k}));
    return out;
  }

  Result<std::vector<Compiled>> run_unit(const InputUnit& unit, std::size_t index) {
    fs::path dir = m_tmp.path() / ("u" + std::to_string(index));
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::vector<Compiled> results;
    if (unit.kind == InputKind::cubin || (unit.kind == InputKind::triton && unit.ptx.empty())) {
      auto r = from_cubin(unit);
      if (!r) return r.error();
      results.push_back(std::move(*r));
      return results;
    }
    std::optional<PtxModule> given;  // the unit's own PTX (.ptx input, Triton)
    if (!unit.ptx.empty()) {
      auto module = load_ptx(unit.ptx);
      if (!module) return module.error();
      given = std::move(*module);
    }
    std::vector<std::string> arches = m_arches;
    if (unit.kind == InputKind::cu && arches.empty()) arches = {k_default_arch};
    if (given && (unit.kind == InputKind::triton || arches.empty())) {
      auto target = normalize_arch(given->target);  // Triton's PTX only assembles for its target
      if (!target) return with_path(unit.ptx, target.error());
      arches = {*target};
    }
    for (const std::string& arch : arches) {
      if (given) {
        auto r = from_ptx(unit, *given, unit.ptx, arch, dir);
        if (!r) return r.error();
        results.push_back(std::move(*r));
        continue;
      }
      auto ptx =
          m_tools.compile_cu(unit.source, arch, m_request.nvcc_flags, m_request.line_info, dir);
      if (!ptx) return ptx.error();
      auto module = load_ptx(*ptx);
      if (!module) return module.error();
      auto r = from_ptx(unit, *module, *ptx, arch, dir);
      if (!r) return r.error();
      results.push_back(std::move(*r));
    }
    return results;
  }

  // Adds the SASS opcode histogram to each kernel, when a disassembler is available.
  void add_histograms(std::vector<Compiled>& compiled, std::vector<std::string>& notes) {
    if (!m_request.sass_histogram) return;
    if (m_tools.disassembler().empty()) {
      notes.push_back("no SASS opcode histogram: neither cuobjdump nor nvdisasm was found");
      return;
    }
    for (Compiled& c : compiled) {
      auto listing = m_tools.disassemble(c.cubin);
      if (!listing) {
        notes.push_back("no SASS opcode histogram for " + c.cubin.string() + ": " +
                        listing.error().message);
        continue;
      }
      auto histograms = parse_sass_listing(*listing);
      for (KernelMetrics& k : c.kernels)
        if (auto it = histograms.find(k.name); it != histograms.end()) k.sass_opcodes = it->second;
    }
  }

 private:
  const LintRequest& m_request;
  std::vector<std::string> m_arches;
  Toolchain m_tools;
  TempDir m_tmp;
  std::vector<std::string> m_notes;
};

// Kernels whose key repeats (Triton specializations that differ only in constexprs) get an
// ordinal so that each has its own baseline entry.
void disambiguate(std::vector<KernelMetrics>& kernels, std::vector<std::string>& notes) {
  std::map<std::string, int> seen;
  for (KernelMetrics& k : kernels) {
    int n = ++seen[k.key()];
    if (n == 1) continue;
    notes.push_back(k.name + " (" + k.arch + ") appears " + std::to_string(n) +
                    " times; later copies are keyed '#" + std::to_string(n) +
                    "' in input order, which is only stable if the inputs are");
    k.variant += "#" + std::to_string(n);
  }
}

}  // namespace

Result<LintReport> analyze(const LintRequest& request) {
  auto units = discover_inputs(request.inputs);
  if (!units) return units.error();
  std::vector<std::string> arches;
  for (const std::string& a : request.arches) {
    auto arch = normalize_arch(a);
    if (!arch) return arch.error();
    if (std::find(arches.begin(), arches.end(), *arch) == arches.end()) arches.push_back(*arch);
  }
  auto tmp = TempDir::create("gpuemu-lint-");
  if (!tmp) return tmp.error();
  Analysis analysis(request, arches, std::move(*tmp));
  bool needs_nvcc = false, needs_ptxas = false;
  for (const InputUnit& u : *units) {
    needs_nvcc |= u.kind == InputKind::cu;
    needs_ptxas |= !u.ptx.empty() || u.kind == InputKind::cu;
  }
  if (needs_nvcc)
    if (Status st = analysis.tools().require_nvcc(); !st) return st.error();
  LintReport report;
  if (needs_ptxas) {
    if (Status st = analysis.tools().require_ptxas(); !st) return st.error();
    auto version = analysis.tools().ptxas_version();
    if (!version) return version.error();
    report.toolkit = *version;
    for (const std::string& arch : arches)
      if (Status st = analysis.tools().check_arch(arch); !st) return st.error();
  }
  std::vector<Compiled> compiled;
  for (std::size_t i = 0; i < units->size(); ++i) {
    auto results = analysis.run_unit((*units)[i], i);
    if (!results) return results.error();
    for (Compiled& c : *results) compiled.push_back(std::move(c));
  }
  report.notes = std::move(analysis.notes());
  analysis.add_histograms(compiled, report.notes);
  for (Compiled& c : compiled)
    for (KernelMetrics& k : c.kernels) report.kernels.push_back(std::move(k));
  disambiguate(report.kernels, report.notes);
  std::stable_sort(report.kernels.begin(), report.kernels.end(),
                   [](const KernelMetrics& a, const KernelMetrics& b) {
                     return std::tie(a.input, a.name, a.arch, a.variant) <
                            std::tie(b.input, b.name, b.arch, b.variant);
                   });
  return report;
}

Baseline make_baseline(const LintReport& report) {
  return Baseline{report.toolkit, report.kernels};
}

}  // namespace gpuemu::lint
