// gpuemu.toml hover (toml_features.hpp): a key's meaning and example, a table's meaning, an op's
// summary on its name.
#include "lsp/toml_features.hpp"

#include "lsp/toml_document.hpp"
#include <gpuemu/project/project_keys.hpp>

namespace gpuemu::lsp {

std::optional<Json> toml_hover(const std::string& text, Position pos, const OpCatalogue& cat) {
  const std::vector<TomlLine> lines = scan_toml(text);
  if (pos.line < 0 || pos.line >= static_cast<int>(lines.size())) return std::nullopt;
  const TomlLine& l = lines[static_cast<std::size_t>(pos.line)];
  auto hover = [&](const std::string& markdown, Range r) {
    return Json{{"contents", {{"kind", "markdown"}, {"value", markdown}}}, {"range", to_json(r)}};
  };
  const int len = static_cast<int>(l.text.size());
  if (l.header) {
    const project::ProjectTable* t = project::find_project_table(l.table);
    if (t == nullptr)
      return hover("`[" + l.header_name + "]` is not a table gpuemu.toml knows (docs/ci.md)",
                   {{pos.line, 0}, {pos.line, len}});
    std::string keys;
    for (const auto& k : t->keys)
      keys += (keys.empty() ? "" : ", ") + std::string("`") + std::string(k.name) + "`";
    return hover(std::string(t->meaning) + (keys.empty() ? "" : "\n\nkeys: " + keys),
                 {{pos.line, 0}, {pos.line, len}});
  }
  if (l.key.empty()) return std::nullopt;
  const project::ProjectKey* key = project::find_project_key(l.table, l.key);
  const std::string where = l.table.empty()   ? "gpuemu.toml"
                            : l.table == "op" ? "[[op]]"
                                              : "[" + l.table + "]";
  if (pos.character >= l.key_begin && pos.character <= l.key_end) {
    if (key == nullptr)
      return hover("`" + l.key + "` is not a key of " + where + " (docs/ci.md lists every key)",
                   {{pos.line, l.key_begin}, {pos.line, l.key_end}});
    return hover("**" + l.key + "** in " + where + ": " + std::string(key->meaning) +
                     "\n\n```toml\n" + l.key + " = " + std::string(key->example) + "\n```",
                 {{pos.line, l.key_begin}, {pos.line, l.key_end}});
  }
  // On the value: an op's summary.
  if (key != nullptr && key->value == project::KeyValue::op_name && l.equals >= 0 &&
      pos.character > l.equals) {
    const std::string op = string_value_in_block(lines, pos.line, l.key);
    auto it = cat.summaries.find(op);
    if (it != cat.summaries.end()) {
      std::string kernels;
      if (auto k = cat.kernels.find(op); k != cat.kernels.end())
        for (const auto& name : k->second) kernels += (kernels.empty() ? "" : ", ") + name;
      return hover("**" + op + "**: " + it->second +
                       (kernels.empty() ? "" : "\n\nbuilt-in kernels: " + kernels),
                   {{pos.line, l.equals + 1}, {pos.line, len}});
    }
  }
  return std::nullopt;
}

}  // namespace gpuemu::lsp
