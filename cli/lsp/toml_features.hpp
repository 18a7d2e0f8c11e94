// gpuemu.toml in the editor: diagnostics (a TOML syntax error; every unknown key and every bad
// value at its own line; then whatever `gpuemu ci`'s reader still refuses, such as a missing
// script), completion (table headers, the keys of the table at the cursor, op names, built-in
// kernels of the [[op]]'s op, dtypes, enumerated values) and hover (each key's and table's
// meaning, an op's summary). Key knowledge comes from project_keys.hpp.
#pragma once

#include "lsp/lsp_types.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::lsp {

// What the daemon's catalogue says (list_ops), plus the file's own [custom_ops.NAME].
struct OpCatalogue {
  bool known = false;  // false: no daemon answered; op and kernel names are not checked
  std::map<std::string, std::string> summaries;             // op -> summary
  std::map<std::string, std::vector<std::string>> kernels;  // op -> built-in kernels
  std::vector<std::string> dtypes_of(const std::string& op) const;
  std::map<std::string, std::vector<std::string>> op_dtypes;
};

OpCatalogue catalogue_from(const Json& list_ops_result);

std::vector<Diagnostic> toml_diagnostics(const std::string& text, const std::string& path,
                                         const OpCatalogue& catalogue);
// A CompletionList's items.
Json toml_completion(const std::string& text, Position pos, const OpCatalogue& catalogue);
// A Hover, or nullopt.
std::optional<Json> toml_hover(const std::string& text, Position pos, const OpCatalogue& catalogue);

}  // namespace gpuemu::lsp
