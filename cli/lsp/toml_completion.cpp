// gpuemu.toml completion (toml_features.hpp), and the catalogue it completes from.
#include "lsp/toml_features.hpp"

#include "lsp/toml_document.hpp"
#include <gpuemu/project/project_keys.hpp>

#include <gpuemu/engine/dtype.hpp>

namespace gpuemu::lsp {

using project::KeyValue;

std::vector<std::string> OpCatalogue::dtypes_of(const std::string& op) const {
  auto it = op_dtypes.find(op);
  return it == op_dtypes.end() ? std::vector<std::string>{} : it->second;
}

OpCatalogue catalogue_from(const Json& list_ops_result) {
  OpCatalogue c;
  const Json ops = list_ops_result.value("ops", Json::array());
  for (const auto& o : ops) {
    if (!o.is_object() || !o.contains("name")) continue;
    const std::string name = o["name"].get<std::string>();
    c.summaries[name] = o.value("summary", "");
    c.kernels[name] = o.value("kernels", std::vector<std::string>{});
    c.op_dtypes[name] = o.value("dtypes", std::vector<std::string>{});
  }
  c.known = !c.summaries.empty();
  return c;
}

namespace {

constexpr int k_kind_keyword = 14, k_kind_value = 12, k_kind_module = 9, k_kind_enum = 20,
              k_kind_property = 10;

Json item(const std::string& label, int kind, const std::string& detail,
          const std::string& documentation, const std::string& insert = "") {
  Json j = {{"label", label}, {"kind", kind}, {"detail", detail}};
  if (!documentation.empty()) j["documentation"] = documentation;
  if (!insert.empty()) j["insertText"] = insert;
  return j;
}

// Values for `key` at the cursor (inside the quotes when the user opened one).
Json value_items(const project::ProjectKey& key, const std::vector<TomlLine>& lines, int line,
                 const std::string& before, const OpCatalogue& cat) {
  Json items = Json::array();
  const bool quoted = before.find('"', before.find('=')) != std::string::npos;
  auto q = [&](const std::string& s) { return quoted ? s : "\"" + s + "\""; };
  switch (key.value) {
    case KeyValue::op_name:
      for (const auto& [op, summary] : cat.summaries)
        items.push_back(item(op, k_kind_module, "op", summary, q(op)));
      for (const auto& l : lines)
        if (l.header && normalise_table(l.header_name) == "custom_ops.*") {
          const std::string name = l.header_name.substr(l.header_name.find('.') + 1);
          items.push_back(item(name, k_kind_module, "custom op", l.header_name, q(name)));
        }
      break;
    case KeyValue::kernel_name: {
      const std::string op = string_value_in_block(lines, line, "name");
      auto it = cat.kernels.find(op);
      if (it != cat.kernels.end())
        for (const auto& k : it->second)
          items.push_back(item(k, k_kind_value, "built-in kernel of " + op, "", q(k)));
      break;
    }
    case KeyValue::dtype_list:
    case KeyValue::envelope: {
      const std::string op = string_value_in_block(lines, line, "name");
      std::vector<std::string> names = cat.dtypes_of(op);
      if (names.empty())
        for (DType d : all_dtypes()) names.emplace_back(dtype_name(d));
      for (const auto& n : names)
        items.push_back(
            item(n, k_kind_enum, "dtype", "", key.value == KeyValue::envelope ? n + " = " : q(n)));
      break;
    }
    case KeyValue::strategy:
    case KeyValue::framework:
    case KeyValue::precision:
      for (auto c : project::key_value_choices(key.value))
        items.push_back(item(std::string(c), k_kind_enum, std::string(key.name),
                             std::string(key.meaning), q(std::string(c))));
      break;
    case KeyValue::boolean:
      for (auto c : project::key_value_choices(key.value))
        items.push_back(
            item(std::string(c), k_kind_keyword, std::string(key.name), std::string(key.meaning)));
      break;
    default:
      items.push_back(
          item(std::string(key.example), k_kind_value, "example", std::string(key.meaning)));
  }
  return items;
}

}  // namespace

Json toml_completion(const std::string& text, Position pos, const OpCatalogue& cat) {
  const std::vector<TomlLine> lines = scan_toml(text);
  Json items = Json::array();
  const TomlLine empty{};
  const TomlLine& l =
      pos.line < static_cast<int>(lines.size()) ? lines[static_cast<std::size_t>(pos.line)] : empty;
  const std::string before = l.text.substr(
      0, std::min<std::size_t>(l.text.size(), static_cast<std::size_t>(pos.character)));
  const std::size_t first = before.find_first_not_of(" \t");
  // A table header being typed.
  if (first != std::string::npos && before[first] == '[') {
    const Range replace{{pos.line, static_cast<int>(first)}, {pos.line, pos.character}};
    for (const char* h : {"[project]", "[defaults]", "[[op]]", "[custom_ops.NAME]", "[lint]",
                          "[ci]", "[ci.presets.NAME]"}) {
      const std::string header = h;
      const std::size_t open = header.rfind('[') + 1;
      const project::ProjectTable* t =
          project::find_project_table(normalise_table(header.substr(open, header.find(']') - open)));
      Json it = item(header, k_kind_module, "table", t ? std::string(t->meaning) : "");
      it["textEdit"] = {{"range", to_json(replace)}, {"newText", header}};
      it["filterText"] = header;
      items.push_back(std::move(it));
    }
    return items;
  }
  const std::string table = pos.line < static_cast<int>(lines.size()) ? l.table
                            : lines.empty()                           ? ""
                                                                      : lines.back().table;
  // A value after "key =".
  const std::size_t eq = before.find('=');
  if (eq != std::string::npos) {
    if (const project::ProjectKey* key = project::find_project_key(table, l.key))
      return value_items(*key, lines, pos.line, before, cat);
    return items;
  }
  // A key of the table the cursor is in.
  if (const project::ProjectTable* t = project::find_project_table(table)) {
    for (const auto& k : t->keys) {
      if (table.empty()) continue;  // top level: tables are headers
      items.push_back(item(std::string(k.name), k_kind_property, std::string(k.meaning),
                           std::string(k.name) + " = " + std::string(k.example),
                           std::string(k.name) + " = "));
    }
  }
  return items;
}

}  // namespace gpuemu::lsp
