// Every key gpuemu.toml knows, per table, with what it means and what value it takes: the one
// list that the reader (project_config.cpp, which refuses any other key) and the editor
// (`gpuemu lsp`: completion, hover, diagnostics of gpuemu.toml) share. docs/ci.md is its prose.
#pragma once

#include <string_view>
#include <vector>

namespace gpuemu::project {

// What a key's value must be (the editor checks these; the reader checks them too, with the
// same words).
enum class KeyValue {
  string,
  positive_int,
  positive_number,
  non_negative_int,  // seed
  boolean,
  strategy,    // regular | boundary | adversarial | special
  framework,   // numpy | torch
  dtype_list,  // an array of dtype names
  string_list,
  script_ref,   // "FILE.py:FUNC"
  op_name,      // a catalogue op (or a [custom_ops.NAME])
  kernel_name,  // a built-in kernel of the op
  table,        // an inline table (dims, attrs)
  envelope,     // a positive number or { dtype = number }
  precision,    // a precision policy or { op_or_family = policy } (gpuemu/engine/precision.hpp)
  any,          // checked elsewhere ([lint] keys: the lint policy reader)
};

struct ProjectKey {
  std::string_view name;
  KeyValue value;
  std::string_view meaning;  // one line, shown on hover
  std::string_view example;  // what completion inserts after "name = "
};

struct ProjectTable {
  std::string_view name;     // "project", "defaults", "op" ([[op]]), "custom_ops.*", "ci",
                             // "ci.presets.*", "lint", "" (the top level)
  std::string_view meaning;  // shown on hover of the table header
  std::vector<ProjectKey> keys;
};

// Every table, in the order docs/ci.md lists them.
const std::vector<ProjectTable>& project_tables();
// The table of that name ("op" for [[op]], "custom_ops.*" for [custom_ops.NAME], "ci.presets.*"
// for [ci.presets.NAME]); nullptr when there is none.
const ProjectTable* find_project_table(std::string_view name);
// A key of a table; nullptr when the table does not know it.
const ProjectKey* find_project_key(std::string_view table, std::string_view key);
// The allowed words of an enumerated value (strategy, framework); empty for other kinds.
std::vector<std::string_view> key_value_choices(KeyValue value);

}  // namespace gpuemu::project
