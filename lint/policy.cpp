#include "gpuemu/lint/policy.hpp"

#include "file_util.hpp"
#include "gpuemu/lint/metrics.hpp"
#include "toolchain.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <functional>

namespace gpuemu::lint {
namespace {

constexpr std::array<std::string_view, 10> k_known_keys = {
    "allow_spills",       "arch",
    "fail_delta_percent", "forbid",
    "max_registers",      "max_shared_bytes",
    "max_stack_bytes",    "missing_kernel",
    "nvcc_flags",         "warn_delta_percent"};

class PolicyReader {
 public:
  explicit PolicyReader(std::string source) : m_source(std::move(source)) {}

  Error error_at(const toml::node& node, const std::string& what) const {
    return make_error(ErrorCode::invalid_argument,
                      m_source + ":" + std::to_string(node.source().begin.line) + ": " + what);
  }

  Result<std::int64_t> non_negative_int(const toml::node& node, std::string_view key) const {
    // is_integer() first: value<int64_t>() of a float converts it (undefined past int64's range).
    const auto value = node.is_integer() ? node.value<std::int64_t>() : std::nullopt;
    if (!value || *value < 0)
      return error_at(node, "[lint]." + std::string(key) + " must be a non-negative integer");
    return *value;
  }

  Result<double> percent(const toml::node& node, std::string_view key) const {
    auto value = node.value<double>();
    if (!(node.is_integer() || node.is_floating_point()) || !value || *value < 0)
      return error_at(node, "[lint]." + std::string(key) + " must be a non-negative number");
    return *value;
  }

  // A string or an array of strings.
  Result<std::vector<std::string>> strings(const toml::node& node, std::string_view key) const {
    std::vector<std::string> out;
    if (auto s = node.value<std::string>(); node.is_string() && s) return std::vector{*s};
    const toml::array* array = node.as_array();
    if (array == nullptr)
      return error_at(node, "[lint]." + std::string(key) + " must be a list of strings");
    for (const toml::node& item : *array) {
      auto s = item.value<std::string>();
      if (!item.is_string() || !s)
        return error_at(item, "[lint]." + std::string(key) + " must be a list of strings");
      out.push_back(*s);
    }
    return out;
  }

  Status apply(std::string_view key, const toml::node& node, LintPolicy& p) const {
    if (key == "arch") {
      auto list = strings(node, key);
      if (!list) return list.error();
      for (const std::string& a : *list) {
        auto arch = normalize_arch(a);
        if (!arch) return error_at(node, arch.error().message);
        p.arches.push_back(*arch);
      }
    } else if (key == "nvcc_flags") {
      auto list = strings(node, key);
      if (!list) return list.error();
      p.nvcc_flags = *list;
    } else if (key == "max_registers" || key == "max_shared_bytes" || key == "max_stack_bytes") {
      auto v = non_negative_int(node, key);
      if (!v) return v.error();
      (key == "max_registers"      ? p.max_registers
       : key == "max_shared_bytes" ? p.max_shared_bytes
                                   : p.max_stack_bytes) = *v;
    } else if (key == "allow_spills") {
      if (!node.is_boolean()) return error_at(node, "[lint].allow_spills must be true or false");
      p.allow_spills = node.value<bool>().value_or(false);
    } else if (key == "warn_delta_percent" || key == "fail_delta_percent") {
      auto v = percent(node, key);
      if (!v) return v.error();
      (key == "warn_delta_percent" ? p.warn_delta_percent : p.fail_delta_percent) = *v;
    } else if (key == "forbid") {
      auto list = strings(node, key);
      if (!list) return list.error();
      for (const std::string& name : *list) {
        if (name != k_forbid_local_memory && !instruction_class_from_name(name))
          return error_at(node, "[lint].forbid: unknown class '" + name +
                                    "' (use local_memory or an instruction class such as fp64)");
        p.forbid.push_back(name);
      }
    } else if (key == "missing_kernel") {
      auto s = node.value<std::string>();
      if (!node.is_string() || !s || (*s != "ignore" && *s != "warn" && *s != "fail"))
        return error_at(node, "[lint].missing_kernel must be \"ignore\", \"warn\" or \"fail\"");
      p.missing_kernel = *s == "ignore" ? MissingKernelAction::ignore
                         : *s == "warn" ? MissingKernelAction::warn
                                        : MissingKernelAction::fail;
    }
    return {};
  }

 private:
  std::string m_source;
};

}  // namespace

Result<LintPolicy> parse_policy(std::string_view toml_text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument, source_name + ":" +
                                                       std::to_string(e.source().begin.line) + ":" +
                                                       std::to_string(e.source().begin.column) +
                                                       ": " + std::string(e.description()));
  }
  LintPolicy policy;
  const toml::node* node = root.get("lint");
  if (node == nullptr) return policy;
  PolicyReader reader(source_name);
  const toml::table* lint = node->as_table();
  if (lint == nullptr) return reader.error_at(*node, "[lint] must be a table");
  for (auto&& [key, value] : *lint) {
    std::string_view name = key.str();
    if (std::find(k_known_keys.begin(), k_known_keys.end(), name) == k_known_keys.end()) {
      std::string known;
      for (std::string_view k : k_known_keys) known += (known.empty() ? "" : ", ") + std::string(k);
      return make_error(ErrorCode::invalid_argument, source_name + ":" +
                                                         std::to_string(key.source().begin.line) +
                                                         ": unknown key '" + std::string(name) +
                                                         "' in [lint] (known: " + known + ")");
    }
    if (Status st = reader.apply(name, value, policy); !st) return st.error();
  }
  if (policy.fail_delta_percent < policy.warn_delta_percent)
    return reader.error_at(*lint, "[lint].fail_delta_percent must not be below warn_delta_percent");
  return policy;
}

Result<LintPolicy> load_policy(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse_policy(*text, path.string());
}

}  // namespace gpuemu::lint
