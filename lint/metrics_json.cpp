// JSON form of KernelMetrics: the element of `--json`'s "kernels" array and of baselines. Unknown
// values are null; unknown keys are ignored when reading (newer baselines stay readable).
#include "gpuemu/lint/metrics.hpp"

#include <nlohmann/json.hpp>

namespace gpuemu::lint {
namespace {

using nlohmann::json;

json optional_int(const std::optional<std::int64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

std::optional<std::int64_t> read_optional_int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer())
    throw json::type_error::create(302, std::string("\"") + key + "\" must be an integer or null",
                                   &j);
  return it->get<std::int64_t>();
}

std::string read_string(const json& j, const char* key, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw json::out_of_range::create(403, std::string("missing \"") + key + "\"", &j);
    return {};
  }
  return it->get<std::string>();
}

}  // namespace

std::string KernelMetrics::key() const {
  return name + "@" + arch + (variant.empty() ? "" : "/" + variant);
}

void to_json(json& j, const InstructionMix& mix) {
  j = json::object();
  for (int i = 0; i < k_instruction_class_count; ++i) {
    auto cls = static_cast<InstructionClass>(i);
    j[std::string(instruction_class_name(cls))] = mix.count(cls);
  }
}

void from_json(const json& j, InstructionMix& mix) {
  mix = InstructionMix{};
  for (const auto& [key, value] : j.items()) {
    if (auto cls = instruction_class_from_name(key)) mix.add(*cls, value.get<std::int64_t>());
  }
}

void to_json(json& j, const SourceLocation& loc) {
  j = json{{"file", loc.file}, {"line", loc.line}, {"column", loc.column}};
}

void from_json(const json& j, SourceLocation& loc) {
  loc.file = j.at("file").get<std::string>();
  loc.line = j.at("line").get<int>();
  loc.column = j.value("column", 0);
}

void to_json(json& j, const KernelMetrics& m) {
  j = json{{"name", m.name},
           {"demangled", m.demangled},
           {"arch", m.arch},
           {"variant", m.variant},
           {"input", m.input},
           {"input_kind", m.input_kind},
           {"registers", optional_int(m.registers)},
           {"spill_store_bytes", optional_int(m.spill_store_bytes)},
           {"spill_load_bytes", optional_int(m.spill_load_bytes)},
           {"stack_bytes", optional_int(m.stack_bytes)},
           {"shared_bytes", optional_int(m.shared_bytes)},
           {"barriers", optional_int(m.barriers)},
           {"instructions", optional_int(m.instructions)},
           {"sass_bytes", optional_int(m.sass_bytes)},
           {"ptx_instructions", optional_int(m.ptx_instructions)},
           {"local_declared_bytes", optional_int(m.local_declared_bytes)},
           {"ptx_virtual_registers", optional_int(m.ptx_virtual_registers)},
           {"mix", m.mix ? json(*m.mix) : json(nullptr)},
           {"location", m.location ? json(*m.location) : json(nullptr)},
           {"sass_opcodes", m.sass_opcodes},
           {"sources", m.sources}};
  json locations = json::object();
  for (const auto& [cls, loc] : m.class_locations)
    locations[std::string(instruction_class_name(cls))] = loc;
  j["class_locations"] = locations;
}

void from_json(const json& j, KernelMetrics& m) {
  if (!j.is_object()) throw json::type_error::create(302, "a kernel must be an object", &j);
  m = KernelMetrics{};
  m.name = read_string(j, "name", true);
  m.arch = read_string(j, "arch", true);
  m.demangled = read_string(j, "demangled", false);
  if (m.demangled.empty()) m.demangled = m.name;
  m.variant = read_string(j, "variant", false);
  m.input = read_string(j, "input", false);
  m.input_kind = read_string(j, "input_kind", false);
  m.registers = read_optional_int(j, "registers");
  m.spill_store_bytes = read_optional_int(j, "spill_store_bytes");
  m.spill_load_bytes = read_optional_int(j, "spill_load_bytes");
  m.stack_bytes = read_optional_int(j, "stack_bytes");
  m.shared_bytes = read_optional_int(j, "shared_bytes");
  m.barriers = read_optional_int(j, "barriers");
  m.instructions = read_optional_int(j, "instructions");
  m.sass_bytes = read_optional_int(j, "sass_bytes");
  m.ptx_instructions = read_optional_int(j, "ptx_instructions");
  m.local_declared_bytes = read_optional_int(j, "local_declared_bytes");
  m.ptx_virtual_registers = read_optional_int(j, "ptx_virtual_registers");
  if (auto it = j.find("mix"); it != j.end() && !it->is_null()) m.mix = it->get<InstructionMix>();
  if (auto it = j.find("location"); it != j.end() && !it->is_null())
    m.location = it->get<SourceLocation>();
  if (auto it = j.find("class_locations"); it != j.end() && it->is_object())
    for (const auto& [key, value] : it->items())
      if (auto cls = instruction_class_from_name(key))
        m.class_locations[*cls] = value.get<SourceLocation>();
  if (auto it = j.find("sass_opcodes"); it != j.end() && it->is_object())
    m.sass_opcodes = it->get<std::map<std::string, std::int64_t>>();
  if (auto it = j.find("sources"); it != j.end() && it->is_object())
    m.sources = it->get<std::map<std::string, std::string>>();
}

}  // namespace gpuemu::lint
