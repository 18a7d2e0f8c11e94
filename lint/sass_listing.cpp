#include "sass_listing.hpp"

#include <cctype>

namespace gpuemu::lint {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_mnemonic(std::string_view s) {
  if (s.empty() || !std::isupper(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isupper(static_cast<unsigned char>(c)) &&
        !std::isdigit(static_cast<unsigned char>(c)) && c != '_')
      return false;
  return true;
}

// The mnemonic of an instruction line's text after its "/*addr*/" prefix, or "".
std::string_view mnemonic(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text[0] == '@') {  // predicate guard: @P0, @!PT
    std::size_t space = text.find_first_of(" \t");
    if (space == std::string_view::npos) return {};
    text = trim(text.substr(space));
  }
  std::size_t end = 0;
  while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])) &&
         text[end] != ';' && text[end] != '.')
    ++end;
  std::string_view op = text.substr(0, end);
  return is_mnemonic(op) ? op : std::string_view{};
}

}  // namespace

std::map<std::string, OpcodeHistogram> parse_sass_listing(std::string_view listing) {
  std::map<std::string, OpcodeHistogram> result;
  std::string current;
  std::size_t pos = 0;
  while (pos < listing.size()) {
    std::size_t end = listing.find('\n', pos);
    if (end == std::string_view::npos) end = listing.size();
    std::string_view line = trim(listing.substr(pos, end - pos));
    pos = end + 1;
    if (std::size_t at = line.find("Function : "); at != std::string_view::npos) {
      current = std::string(trim(line.substr(at + 11)));
      continue;
    }
    if (line.substr(0, 6) == ".text." && line.back() == ':') {
      current = std::string(line.substr(6, line.size() - 7));
      continue;
    }
    if (line.substr(0, 8) == ".section" || line.substr(0, 2) == "//") {
      if (line.find(".text.") == std::string_view::npos) current.clear();
      continue;
    }
    if (current.empty() || line.substr(0, 2) != "/*") continue;
    std::size_t close = line.find("*/");
    if (close == std::string_view::npos) continue;
    std::string_view op = mnemonic(line.substr(close + 2));
    if (op.empty() || op == "NOP") continue;
    result[current][std::string(op)]++;
  }
  return result;
}

}  // namespace gpuemu::lint
