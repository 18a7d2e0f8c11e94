#include "ptx_parser.hpp"

#include "instruction_class.hpp"
#include "ptx_statement.hpp"

#include <cctype>
#include <utility>

namespace gpuemu::lint {
namespace {

Error ptx_error(int line, const std::string& what) {
  return make_error(ErrorCode::invalid_argument,
                    "malformed PTX: line " + std::to_string(line) + ": " + what);
}

bool is_blank(std::string_view s) {
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  return true;
}

// Walks the text once. Module level holds directives and function headers; a function body is a
// brace-delimited run of statements, in which `{`/`}` either open a scope (statement empty so far)
// or belong to an operand list (`{%r1, %r2}`); `.section` blocks (DWARF bytes) are skipped.
class PtxScanner {
 public:
  Result<PtxModule> run(std::string_view text) {
    int line_no = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      ++line_no;
      Status st = scan_line(strip_comments(text.substr(pos, end - pos)), line_no);
      if (!st) return st.error();
      pos = end + 1;
    }
    if (m_in_comment) return ptx_error(line_no, "unterminated /* comment");
    if (m_section_depth > 0 || m_section_expects_brace)
      return ptx_error(line_no, "unterminated .section block");
    if (m_in_function)
      return ptx_error(m_function.line, "unterminated body of '" + m_function.name + "'");
    if (!is_blank(m_pending)) return ptx_error(m_pending_line, "statement without ';' at end");
    if (m_module.version.empty()) return ptx_error(1, "no .version directive (not PTX?)");
    if (m_module.target.empty()) return ptx_error(1, "no .target directive");
    return std::move(m_module);
  }

 private:
  // Removes // and /* */ comments (outside string literals) from one line.
  std::string strip_comments(std::string_view line) {
    std::string out;
    bool in_string = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      char c = line[i];
      char next = i + 1 < line.size() ? line[i + 1] : '\0';
      if (m_in_comment) {
        if (c == '*' && next == '/') m_in_comment = false, ++i;
        continue;
      }
      if (!in_string && c == '/' && next == '/') break;
      if (!in_string && c == '/' && next == '*') {
        m_in_comment = true, ++i;
        continue;
      }
      if (c == '"') in_string = !in_string;
      out.push_back(c);
    }
    return out;
  }

  Status scan_line(const std::string& line, int line_no) {
    for (char c : line)
      if (c == '\0' || (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r'))
        return ptx_error(line_no, "binary data");
    if (m_section_depth == 0 && !m_section_expects_brace && is_blank(m_pending)) {
      std::string_view first = first_token(line);
      if (first == ".version" || first == ".target" || first == ".address_size" ||
          first == ".file" || first == ".loc")
        return line_directive(first, line, line_no);
      if (first == ".section") {
        if (m_in_function) return ptx_error(line_no, ".section inside a function body");
        m_section_expects_brace = true;
        std::size_t brace = line.find('{');
        return brace == std::string::npos ? Status{} : scan_chars(line.substr(brace), line_no);
      }
    }
    return scan_chars(line, line_no);
  }

  Status line_directive(std::string_view name, const std::string& line, int line_no) {
    std::string_view rest = std::string_view(line).substr(line.find(name) + name.size());
    if (name == ".version") {
      m_module.version = std::string(first_token(rest));
      if (m_module.version.empty()) return ptx_error(line_no, ".version without a number");
    } else if (name == ".target") {
      std::string target(first_token(rest));
      if (!target.empty() && target.back() == ',') target.pop_back();
      if (target.empty()) return ptx_error(line_no, ".target without a target");
      if (m_module.target.empty()) m_module.target = target;
    } else if (name == ".file") {
      auto file = parse_file_directive(rest);
      if (!file) return ptx_error(line_no, "malformed .file directive");
      m_module.files[file->first] = file->second;
    } else if (name == ".loc") {
      if (!m_in_function) return ptx_error(line_no, ".loc outside a function body");
      auto loc = parse_loc_directive(rest);
      if (!loc) return ptx_error(line_no, "malformed .loc directive");
      m_current_loc = *loc;
      if (!m_function.first_loc) m_function.first_loc = *loc;
    }
    return {};
  }

  Status scan_chars(std::string_view line, int line_no) {
    for (char c : line) {
      if (m_section_depth > 0 || m_section_expects_brace) {
        if (c == '{') m_section_depth++, m_section_expects_brace = false;
        if (c == '}' && m_section_depth > 0) m_section_depth--;
        continue;
      }
      if (is_blank(m_pending) && !std::isspace(static_cast<unsigned char>(c)))
        m_pending_line = line_no;
      if (c == ';' && m_operand_depth == 0) {
        Status st = finish_statement();
        if (!st) return st;
      } else if (c == '{') {
        Status st = open_brace(line_no);
        if (!st) return st;
      } else if (c == '}') {
        Status st = close_brace(line_no);
        if (!st) return st;
      } else if (c == ':' && m_operand_depth == 0 && is_label(m_pending)) {
        m_pending.clear();  // a label: `$L__BB0_2:`
      } else {
        m_pending.push_back(c);
      }
    }
    m_pending.push_back(' ');
    return {};
  }

  Status open_brace(int line_no) {
    if (!m_in_function && is_function_header(m_pending)) {
      auto header = parse_function_header(m_pending);
      if (!header) return ptx_error(m_pending_line, "malformed function header");
      m_function = PtxFunction{};
      m_function.name = header->name;
      m_function.is_entry = header->is_entry;
      m_function.line = m_pending_line;
      m_in_function = true;
      m_body_depth = 1;
      m_current_loc.reset();
      m_pending.clear();
      return {};
    }
    if (m_in_function && is_blank(m_pending) && m_operand_depth == 0) {
      m_body_depth++;
      return {};
    }
    if (++m_operand_depth > 64) return ptx_error(line_no, "braces nested too deeply");
    m_pending.push_back('{');
    return {};
  }

  Status close_brace(int line_no) {
    if (m_operand_depth > 0) {
      m_operand_depth--;
      m_pending.push_back('}');
      return {};
    }
    if (!m_in_function) return ptx_error(line_no, "unbalanced '}'");
    if (!is_blank(m_pending)) return ptx_error(m_pending_line, "statement without ';' before '}'");
    if (--m_body_depth == 0) {
      m_in_function = false;
      m_module.functions.push_back(std::move(m_function));
      m_function = PtxFunction{};
    }
    return {};
  }

  Status finish_statement() {
    std::string statement = std::exchange(m_pending, {});
    if (is_blank(statement)) return {};
    if (!m_in_function) {
      // Module-level declarations (.global/.shared/.const variables, prototypes) end here.
      std::string_view first = first_token(statement);
      if (first.empty() || first[0] != '.')
        return ptx_error(m_pending_line,
                         "unexpected '" + std::string(first.substr(0, 40)) + "' at module level");
      return {};
    }
    Result<PtxStatement> parsed = parse_body_statement(statement);
    if (!parsed) return ptx_error(m_pending_line, parsed.error().message);
    return account(*parsed);
  }

  Status account(const PtxStatement& s) {
    if (s.kind == PtxStatement::Kind::local_decl) m_function.local_bytes += s.bytes;
    if (s.kind == PtxStatement::Kind::reg_decl) m_function.virtual_registers += s.count;
    if (s.kind != PtxStatement::Kind::instruction) return {};
    m_function.instructions++;
    ClassSet classes = classify_opcode(s.opcode);
    if (s.predicated) classes |= class_bit(InstructionClass::predicated);
    for (int i = 0; i < k_instruction_class_count; ++i) {
      auto cls = static_cast<InstructionClass>(i);
      if ((classes & class_bit(cls)) == 0) continue;
      m_function.mix.add(cls);
      if (m_current_loc && !m_function.class_locs.count(cls))
        m_function.class_locs[cls] = *m_current_loc;
    }
    return {};
  }

  PtxModule m_module;
  PtxFunction m_function;
  bool m_in_function = false;
  bool m_in_comment = false;
  int m_body_depth = 0;
  int m_operand_depth = 0;
  int m_section_depth = 0;
  bool m_section_expects_brace = false;
  std::string m_pending;
  int m_pending_line = 0;
  std::optional<PtxLoc> m_current_loc;
};

}  // namespace

std::optional<SourceLocation> PtxModule::resolve(const PtxLoc& loc) const {
  auto it = files.find(loc.file);
  if (it == files.end()) return std::nullopt;
  return SourceLocation{it->second, loc.line, loc.column};
}

Result<PtxModule> parse_ptx(std::string_view text) {
  return PtxScanner{}.run(text);
}

}  // namespace gpuemu::lint
