// gpuemu.toml diagnostics (toml_features.hpp).
#include "lsp/toml_features.hpp"

#include <gpuemu/project/project_config.hpp>
#include <gpuemu/project/project_keys.hpp>

#include <toml++/toml.h>
#include <gpuemu/engine/dtype.hpp>

#include <algorithm>
#include <cstdlib>
#include <set>

namespace gpuemu::lsp {
namespace {

using project::KeyValue;

class Checker {
 public:
  explicit Checker(const OpCatalogue& cat, std::set<std::string> custom_ops)
      : m_cat(cat), m_custom(std::move(custom_ops)) {}

  std::vector<Diagnostic> out;

  void add(const toml::source_region& where, const std::string& code, const std::string& message,
           int width = 200) {
    const int line = std::max<int>(0, static_cast<int>(where.begin.line) - 1);
    const int col = std::max<int>(0, static_cast<int>(where.begin.column) - 1);
    Diagnostic d;
    d.range = {{line, col}, {line, col + width}};
    d.code = code;
    d.message = message;
    out.push_back(std::move(d));
  }

  void check_table(const toml::table& t, std::string_view table_name, const std::string& where,
                   const std::string& op_name = "") {
    const project::ProjectTable* known = project::find_project_table(table_name);
    for (auto&& [key, node] : t) {
      const std::string k(key.str());
      const project::ProjectKey* pk = project::find_project_key(table_name, k);
      if (pk == nullptr) {
        std::string list;
        if (known)
          for (const auto& kk : known->keys)
            list += (list.empty() ? "" : ", ") + std::string(kk.name);
        add(key.source(), "unknown-key",
            k == "tolerance"
                ? "'tolerance' is not a key: override the envelope with envelope = 6.0 "
                  "or envelope = { float16 = 8.0 } (docs/ci.md)"
                : "unknown key '" + k + "' in " + where + " (known: " + list + ")",
            static_cast<int>(k.size()));
        continue;
      }
      if (!table_name.empty()) check_value(node, *pk, op_name);  // top level: tables, seen below
    }
  }

  void check_value(const toml::node& n, const project::ProjectKey& key, const std::string& op) {
    const std::string k(key.name);
    auto bad = [&](const std::string& what) {
      add(n.source(), "bad-value", "'" + k + "' " + what);
    };
    switch (key.value) {
      case KeyValue::string:
      case KeyValue::script_ref:
        if (!n.is_string()) return bad("must be a string");
        if (key.value == KeyValue::script_ref) {
          const std::string s = *n.value<std::string>();
          const auto colon = s.rfind(':');
          if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
            bad("must be \"FILE.py:FUNC\", got '" + s + "'");
        }
        return;
      case KeyValue::positive_int:
        if (!n.is_integer() || *n.value<std::int64_t>() < 1) bad("must be a positive integer");
        return;
      case KeyValue::non_negative_int:
        if (!n.is_integer() || *n.value<std::int64_t>() < 0) bad("must be a non-negative integer");
        return;
      case KeyValue::positive_number:
        if (!(n.is_integer() || n.is_floating_point()) || !(*n.value<double>() > 0))
          bad("must be a positive number");
        return;
      case KeyValue::boolean:
        if (!n.is_boolean()) bad("must be true or false");
        return;
      case KeyValue::strategy:
      case KeyValue::framework: {
        const auto choices = project::key_value_choices(key.value);
        const std::string s = n.is_string() ? *n.value<std::string>() : "";
        if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
          std::string list;
          for (auto c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
          bad("must be one of " + list + (n.is_string() ? ", got '" + s + "'" : ""));
        }
        return;
      }
      case KeyValue::dtype_list:
      case KeyValue::string_list: {
        const toml::array* a = n.as_array();
        if (a == nullptr) return bad("must be an array of strings");
        for (const toml::node& item : *a) {
          if (!item.is_string()) {
            add(item.source(), "bad-value", "'" + k + "' items must be strings");
            continue;
          }
          const std::string s = *item.value<std::string>();
          if (key.value == KeyValue::dtype_list && !parse_dtype(s))
            add(item.source(), "unknown-dtype", "unknown dtype '" + s + "'");
          else if (key.value == KeyValue::dtype_list && !op.empty() && m_cat.known) {
            const auto allowed = m_cat.dtypes_of(op);
            if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end())
              add(item.source(), "unknown-dtype",
                  "op '" + op + "' does not take dtype '" + s + "'");
          }
        }
        return;
      }
      case KeyValue::op_name: {
        if (!n.is_string()) return bad("must be a string");
        const std::string s = *n.value<std::string>();
        if (m_cat.known && !m_cat.summaries.count(s) && !m_custom.count(s))
          add(n.source(), "unknown-op",
              "unknown op '" + s + "' (gpuemu ops list; or a [custom_ops." + s + "])");
        return;
      }
      case KeyValue::kernel_name: {
        if (!n.is_string()) return bad("must be a string");
        const std::string s = *n.value<std::string>();
        auto it = m_cat.kernels.find(op);
        if (m_cat.known && it != m_cat.kernels.end() &&
            std::find(it->second.begin(), it->second.end(), s) == it->second.end()) {
          std::string list;
          for (const auto& kname : it->second) list += (list.empty() ? "" : ", ") + kname;
          add(n.source(), "unknown-kernel",
              "op '" + op + "' has no built-in kernel '" + s + "' (" + list + ")");
        }
        return;
      }
      case KeyValue::table:
        if (!n.is_table()) bad("must be a table: " + std::string(key.example));
        return;
      case KeyValue::envelope:
        if (const toml::table* per = n.as_table()) {
          for (auto&& [dt, v] : *per) {
            if (!parse_dtype(std::string(dt.str())))
              add(dt.source(), "unknown-dtype",
                  "envelope: unknown dtype '" + std::string(dt.str()) + "'");
            else if (!(v.is_integer() || v.is_floating_point()) || !(*v.value<double>() > 0))
              add(v.source(), "bad-value",
                  "envelope." + std::string(dt.str()) + " must be a positive number");
          }
        } else if (!(n.is_integer() || n.is_floating_point()) || !(*n.value<double>() > 0)) {
          bad("must be a positive number or { dtype = number }");
        }
        return;
      case KeyValue::precision: {
        auto check_policy = [&](const toml::node& v, const std::string& what) {
          const std::string s = v.is_string() ? *v.value<std::string>() : "";
          if (!parse_precision(s))
            add(v.source(), "bad-value",
                what + " must be a precision policy: ieee, tf32, tf32x3 or bf16x3" +
                    (v.is_string() ? ", got '" + s + "'" : ""));
        };
        if (const toml::table* per = n.as_table()) {
          for (auto&& [key2, v] : *per) check_policy(v, "precision." + std::string(key2.str()));
        } else {
          check_policy(n, "'precision'");
        }
        return;
      }
      case KeyValue::any:
        return;
    }
  }

 private:
  const OpCatalogue& m_cat;
  std::set<std::string> m_custom;
};

// "FILE:LINE: message" -> (LINE, message)
std::pair<int, std::string> split_location(const std::string& message, const std::string& path) {
  if (message.rfind(path + ":", 0) == 0) {
    const std::string rest = message.substr(path.size() + 1);
    char* end = nullptr;
    const long line = std::strtol(rest.c_str(), &end, 10);
    if (end != rest.c_str() && *end == ':') {
      std::string msg(end + 1);
      // "LINE:COL: ..." (a syntax error) keeps only the message
      char* end2 = nullptr;
      std::strtol(msg.c_str(), &end2, 10);
      if (end2 != msg.c_str() && *end2 == ':') msg = std::string(end2 + 1);
      return {static_cast<int>(line), msg.substr(msg.find_first_not_of(' '))};
    }
    return {1, rest};
  }
  return {1, message};
}

}  // namespace

std::vector<Diagnostic> toml_diagnostics(const std::string& text, const std::string& path,
                                         const OpCatalogue& catalogue) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    Diagnostic d;
    const int line = std::max<int>(0, static_cast<int>(e.source().begin.line) - 1);
    const int col = std::max<int>(0, static_cast<int>(e.source().begin.column) - 1);
    d.range = {{line, col}, {line, col + 1}};
    d.code = "syntax";
    d.message = std::string(e.description());
    return {d};
  }
  std::set<std::string> custom;
  if (const toml::table* c = root["custom_ops"].as_table())
    for (auto&& [name, body] : *c) custom.insert(std::string(name.str()));
  Checker check(catalogue, custom);
  check.check_table(root, "", "gpuemu.toml");
  for (const char* t : {"project", "defaults", "ci"})
    if (const toml::table* tt = root[t].as_table())
      check.check_table(*tt, t, std::string("[") + t + "]");
  if (const toml::table* ci = root["ci"].as_table())
    if (const toml::table* presets = (*ci)["presets"].as_table())
      for (auto&& [name, body] : *presets)
        if (const toml::table* p = body.as_table())
          check.check_table(*p, "ci.presets.*", "[ci.presets." + std::string(name.str()) + "]");
  if (const toml::table* c = root["custom_ops"].as_table())
    for (auto&& [name, body] : *c)
      if (const toml::table* p = body.as_table())
        check.check_table(*p, "custom_ops.*", "[custom_ops." + std::string(name.str()) + "]");
  if (const toml::array* ops = root["op"].as_array())
    for (const toml::node& item : *ops)
      if (const toml::table* t = item.as_table()) {
        const std::string op = (*t)["name"].value_or(std::string());
        check.check_table(*t, "op", "[[op]]", op);
        if (!t->contains("name"))
          check.add(t->source(), "missing-key", "[[op]] needs 'name' (a catalogue op)", 5);
        else if (t->contains("script") == t->contains("kernel"))
          check.add(t->source(), "missing-key",
                    "[[op]] '" + op + "' needs exactly one of 'script' or 'kernel'", 5);
      }
  std::vector<Diagnostic> out = std::move(check.out);
  // What only the reader itself finds (a missing script file, a schema that does not parse, ...):
  // its first error, unless a line already has one.
  auto parsed = project::parse_project_config(text, path);
  if (!parsed) {
    auto [line, message] = split_location(parsed.error().message, path);
    const int l = std::max(0, line - 1);
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [l](const Diagnostic& d) { return d.range.start.line == l; });
    if (!seen) {
      Diagnostic d;
      d.range = {{l, 0}, {l, 200}};
      d.code = "config";
      d.message = message;
      out.push_back(std::move(d));
    }
  }
  return out;
}

}  // namespace gpuemu::lsp
