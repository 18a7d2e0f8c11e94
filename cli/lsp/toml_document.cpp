#include "lsp/toml_document.hpp"

#include <cctype>
#include <sstream>

namespace gpuemu::lsp {

std::string normalise_table(const std::string& header_name) {
  std::string h;
  for (char c : header_name)
    if (!std::isspace(static_cast<unsigned char>(c))) h.push_back(c);
  if (h.rfind("custom_ops.", 0) == 0) return "custom_ops.*";
  if (h.rfind("ci.presets.", 0) == 0) return "ci.presets.*";
  if (h.rfind("lint.", 0) == 0) return "lint";
  return h;
}

std::vector<TomlLine> scan_toml(const std::string& text) {
  std::vector<TomlLine> out;
  std::istringstream in(text);
  std::string table;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    TomlLine t;
    t.text = l;
    const std::size_t first = l.find_first_not_of(" \t");
    if (first != std::string::npos && l[first] == '[') {
      const bool array = l.compare(first, 2, "[[") == 0;
      const std::size_t open = first + (array ? 2 : 1);
      const std::size_t close = l.find(']', open);
      t.header = true;
      t.header_name = l.substr(open, close == std::string::npos ? std::string::npos : close - open);
      table = normalise_table(t.header_name);
      t.table = table;
      out.push_back(std::move(t));
      continue;
    }
    t.table = table;
    if (first != std::string::npos && l[first] != '#') {
      std::size_t end = first;
      while (end < l.size() && (std::isalnum(static_cast<unsigned char>(l[end])) || l[end] == '_' ||
                                l[end] == '-' || l[end] == '.'))
        ++end;
      if (end > first) {
        t.key = l.substr(first, end - first);
        t.key_begin = static_cast<int>(first);
        t.key_end = static_cast<int>(end);
        const std::size_t eq = l.find('=', end);
        if (eq != std::string::npos && l.find_first_not_of(" \t", end) == eq)
          t.equals = static_cast<int>(eq);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string string_value_in_block(const std::vector<TomlLine>& lines, int line,
                                  const std::string& key) {
  if (line < 0 || line >= static_cast<int>(lines.size())) return "";
  int begin = line, end = line;
  while (begin > 0 && !lines[static_cast<std::size_t>(begin)].header) --begin;
  while (end + 1 < static_cast<int>(lines.size()) &&
         !lines[static_cast<std::size_t>(end + 1)].header)
    ++end;
  for (int i = begin; i <= end; ++i) {
    const TomlLine& t = lines[static_cast<std::size_t>(i)];
    if (t.key != key || t.equals < 0) continue;
    const std::size_t q1 = t.text.find('"', static_cast<std::size_t>(t.equals));
    const std::size_t q2 = q1 == std::string::npos ? q1 : t.text.find('"', q1 + 1);
    if (q2 != std::string::npos) return t.text.substr(q1 + 1, q2 - q1 - 1);
  }
  return "";
}

}  // namespace gpuemu::lsp
