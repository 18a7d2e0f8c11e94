// Absolute policy limits on the current kernels (no baseline needed).
#include "gpuemu/lint/diff.hpp"

namespace gpuemu::lint {
namespace {

Finding finding(Severity severity, std::string rule, const KernelMetrics& k, std::string message) {
  return Finding{severity, std::move(rule),    k.name,    k.arch,
                 k.input,  std::move(message), k.location};
}

void check_max(std::vector<Finding>& out, const KernelMetrics& k, const char* rule,
               const char* what, const std::optional<std::int64_t>& value,
               const std::optional<std::int64_t>& limit, const char* key) {
  if (!value || !limit || *value <= *limit) return;
  out.push_back(finding(Severity::error, rule, k,
                        std::string(what) + " " + std::to_string(*value) + " exceeds " + key +
                            " = " + std::to_string(*limit)));
}

std::int64_t value_or_zero(const std::optional<std::int64_t>& v) {
  return v.value_or(0);
}

void check_local_memory(std::vector<Finding>& out, const KernelMetrics& k) {
  std::int64_t ld = k.mix ? k.mix->count(InstructionClass::ld_local) : 0;
  std::int64_t st = k.mix ? k.mix->count(InstructionClass::st_local) : 0;
  std::int64_t spills = value_or_zero(k.spill_store_bytes) + value_or_zero(k.spill_load_bytes);
  if (ld + st + value_or_zero(k.local_declared_bytes) + value_or_zero(k.stack_bytes) + spills == 0)
    return;
  Finding f =
      finding(Severity::error, "forbidden-class", k,
              "forbidden local memory: " + std::to_string(ld) + " ld.local, " + std::to_string(st) +
                  " st.local, " + std::to_string(value_or_zero(k.local_declared_bytes)) +
                  " bytes declared, " + std::to_string(value_or_zero(k.stack_bytes)) +
                  " bytes stack frame, " + std::to_string(spills) + " bytes spilled");
  for (InstructionClass cls : {InstructionClass::st_local, InstructionClass::ld_local})
    if (auto it = k.class_locations.find(cls); it != k.class_locations.end())
      f.location = it->second;
  out.push_back(std::move(f));
}

void check_forbidden(std::vector<Finding>& out, const KernelMetrics& k, const std::string& name) {
  if (name == k_forbid_local_memory) return check_local_memory(out, k);
  auto cls = instruction_class_from_name(name);
  if (!cls) return;
  if (!k.mix) {
    out.push_back(finding(Severity::note, "forbidden-class", k,
                          "cannot check forbidden class '" + name + "' without PTX"));
    return;
  }
  std::int64_t n = k.mix->count(*cls);
  if (n == 0) return;
  Finding f = finding(
      Severity::error, "forbidden-class", k,
      "forbidden " + name + ": " + std::to_string(n) + " PTX instruction" + (n == 1 ? "" : "s"));
  if (auto it = k.class_locations.find(*cls); it != k.class_locations.end())
    f.location = it->second;
  out.push_back(std::move(f));
}

}  // namespace

std::vector<Finding> check_limits(const std::vector<KernelMetrics>& current,
                                  const LintPolicy& policy) {
  std::vector<Finding> out;
  for (const KernelMetrics& k : current) {
    check_max(out, k, "max-registers", "registers", k.registers, policy.max_registers,
              "max_registers");
    check_max(out, k, "max-shared", "static shared bytes", k.shared_bytes, policy.max_shared_bytes,
              "max_shared_bytes");
    check_max(out, k, "max-stack", "stack frame bytes", k.stack_bytes, policy.max_stack_bytes,
              "max_stack_bytes");
    std::int64_t stores = value_or_zero(k.spill_store_bytes);
    std::int64_t loads = value_or_zero(k.spill_load_bytes);
    if (!policy.allow_spills && stores + loads > 0)
      out.push_back(finding(Severity::error, "spills", k,
                            "spills " + std::to_string(stores) + " bytes stored, " +
                                std::to_string(loads) + " bytes loaded (allow_spills = false)"));
    for (const std::string& name : policy.forbid) check_forbidden(out, k, name);
  }
  return out;
}

}  // namespace gpuemu::lint
