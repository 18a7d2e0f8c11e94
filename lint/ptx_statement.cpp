#include "ptx_statement.hpp"

#include "instruction_class.hpp"

#include <cctype>
#include <charconv>
#include <limits>
#include <vector>

namespace gpuemu::lint {
namespace {

constexpr std::int64_t k_max_declared = std::int64_t{1} << 40;  // far beyond any real kernel

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$' || c == '%';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, std::string_view separators) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || separators.find(s[i]) != std::string_view::npos) {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// A non-negative integer no larger than `max`, consuming leading spaces; advances `s`.
std::optional<std::int64_t> take_int(std::string_view& s, std::int64_t max) {
  s = trim(s);
  std::int64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || value < 0 || value > max) return std::nullopt;
  s.remove_prefix(static_cast<std::size_t>(ptr - s.data()));
  return value;
}

std::optional<PtxLoc> take_loc(std::string_view& s) {
  constexpr std::int64_t k_max = std::numeric_limits<int>::max();
  auto file = take_int(s, k_max);
  auto line = take_int(s, k_max);
  auto column = take_int(s, k_max);
  if (!file || !line || !column) return std::nullopt;
  return PtxLoc{static_cast<int>(*file), static_cast<int>(*line), static_cast<int>(*column)};
}

std::int64_t type_size(std::string_view type) {
  if (type == ".pred") return 1;
  std::size_t digits = type.find_first_of("0123456789");
  if (digits == std::string_view::npos || type.size() < 3 || type[0] != '.') return 0;
  std::int64_t bits = 0;
  auto [ptr, ec] = std::from_chars(type.data() + digits, type.data() + type.size(), bits);
  if (ec != std::errc{} || bits <= 0 || bits > 1024) return 0;
  return bits % 8 == 0 ? bits / 8 : 1;
}

// `.reg .b32 %r<6>;` declares 6; `.reg .f32 %f1, %f2;` declares 2.
Result<std::int64_t> count_registers(std::string_view operands) {
  std::int64_t total = 0;
  for (std::string_view name : split(operands, ",")) {
    name = trim(name);
    std::size_t open = name.find('<');
    if (open == std::string_view::npos) {
      total += 1;
      continue;
    }
    std::string_view inner = name.substr(open + 1);
    auto n = take_int(inner, k_max_declared);
    if (!n || trim(inner) != ">") return make_error(ErrorCode::invalid_argument, "bad .reg count");
    total += *n;
    if (total > k_max_declared) return make_error(ErrorCode::invalid_argument, "bad .reg count");
  }
  return total;
}

// `.local .align 16 .b8 __local_depot2[256];`: element size times array extents.
Result<std::int64_t> local_bytes(std::string_view decl) {
  std::int64_t elem = 0, vector = 1;
  std::vector<std::string_view> tokens = split(decl, " \t\r");
  std::size_t i = 1;
  for (; i < tokens.size() && tokens[i][0] == '.'; ++i) {
    std::string_view t = tokens[i];
    if (t == ".align" && i + 1 < tokens.size())
      ++i;  // skip the alignment value
    else if (t == ".v2" || t == ".v4" || t == ".v8")
      vector = t[2] - '0';
    else if (type_size(t) > 0)
      elem = type_size(t);
  }
  std::int64_t total = 0;
  for (; i < tokens.size(); ++i) {
    for (std::string_view name : split(tokens[i], ",")) {
      std::int64_t extent = 1;
      for (std::size_t open = name.find('['); open != std::string_view::npos;
           open = name.find('[', open + 1)) {
        std::string_view inner = name.substr(open + 1);
        if (!inner.empty() && inner[0] == ']') {
          extent = 0;  // unsized: contributes nothing
          continue;
        }
        auto n = take_int(inner, k_max_declared);
        if (!n || inner.empty() || inner[0] != ']')
          return make_error(ErrorCode::invalid_argument, "bad .local extent");
        extent = *n == 0 ? 0 : (extent > k_max_declared / *n ? k_max_declared : extent * *n);
      }
      total += elem * vector * extent;
      if (total > k_max_declared) return make_error(ErrorCode::invalid_argument, "bad .local size");
    }
  }
  return total;
}

}  // namespace

std::string_view first_token(std::string_view text) {
  text = trim(text);
  std::size_t end = 0;
  while (end < text.size() && !is_space(text[end])) ++end;
  return text.substr(0, end);
}

bool is_label(std::string_view text) {
  text = trim(text);
  if (text.empty()) return false;
  for (char c : text)
    if (!is_ident_char(c)) return false;
  return true;
}

bool is_function_header(std::string_view text) {
  for (std::string_view token : split(text, " \t\r("))
    if (token == ".entry" || token == ".func") return true;
  return false;
}

std::optional<FunctionHeader> parse_function_header(std::string_view text) {
  FunctionHeader header;
  std::size_t entry = text.find(".entry");
  std::size_t func = text.find(".func");
  std::size_t at = entry != std::string_view::npos ? entry : func;
  if (at == std::string_view::npos) return std::nullopt;
  header.is_entry = entry != std::string_view::npos;
  std::string_view rest = trim(text.substr(at + (header.is_entry ? 6 : 5)));
  if (!rest.empty() && rest[0] == '(') {  // a .func's return parameter list
    std::size_t close = rest.find(')');
    if (close == std::string_view::npos) return std::nullopt;
    rest = trim(rest.substr(close + 1));
  }
  std::size_t end = 0;
  while (end < rest.size() && is_ident_char(rest[end])) ++end;
  if (end == 0) return std::nullopt;
  header.name = std::string(rest.substr(0, end));
  return header;
}

std::optional<std::pair<int, std::string>> parse_file_directive(std::string_view rest) {
  auto index = take_int(rest, std::numeric_limits<int>::max());
  if (!index) return std::nullopt;
  rest = trim(rest);
  if (rest.empty() || rest[0] != '"') return std::nullopt;
  std::size_t close = rest.find('"', 1);
  if (close == std::string_view::npos) return std::nullopt;
  return std::pair{static_cast<int>(*index), std::string(rest.substr(1, close - 1))};
}

std::optional<PtxLoc> parse_loc_directive(std::string_view rest) {
  auto loc = take_loc(rest);
  if (!loc) return std::nullopt;
  std::size_t inlined = rest.find("inlined_at");
  if (inlined != std::string_view::npos) {
    std::string_view call_site = rest.substr(inlined + 10);
    if (auto site = take_loc(call_site)) return site;
    return std::nullopt;
  }
  return loc;
}

Result<PtxStatement> parse_body_statement(std::string_view statement) {
  statement = trim(statement);
  PtxStatement out;
  if (statement.empty()) return out;
  if (statement[0] == '.') {
    std::string_view directive = first_token(statement);
    if (directive == ".reg") {
      out.kind = PtxStatement::Kind::reg_decl;
      std::vector<std::string_view> tokens = split(statement, " \t\r");
      std::size_t i = 1;
      while (i < tokens.size() && tokens[i][0] == '.') ++i;
      std::string_view names =
          i < tokens.size()
              ? statement.substr(static_cast<std::size_t>(tokens[i].data() - statement.data()))
              : std::string_view{};
      auto n = count_registers(names);
      if (!n) return n.error();
      out.count = *n;
    } else if (directive == ".local") {
      out.kind = PtxStatement::Kind::local_decl;
      auto n = local_bytes(statement);
      if (!n) return n.error();
      out.bytes = *n;
    }
    return out;
  }
  out.kind = PtxStatement::Kind::instruction;
  if (statement[0] == '@') {
    out.predicated = true;
    std::size_t end = 1;
    while (end < statement.size() && !is_space(statement[end])) ++end;
    statement = trim(statement.substr(end));
  }
  std::size_t end = 0;
  while (end < statement.size() && is_opcode_char(statement[end])) ++end;
  if (end == 0 || !std::isalpha(static_cast<unsigned char>(statement[0])) ||
      (end < statement.size() && !is_space(statement[end])))
    return make_error(
        ErrorCode::invalid_argument,
        "malformed instruction '" + std::string(first_token(statement).substr(0, 40)) + "'");
  out.opcode = std::string(statement.substr(0, end));
  return out;
}

}  // namespace gpuemu::lint
