#include "schema/expr.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace gpuemu {

struct Expr::Node {
  enum class Kind { literal, name, binary, unary } kind = Kind::literal;
  std::int64_t value = 0;
  std::string name;
  int index = -1;
  std::string op;
  std::shared_ptr<const Node> lhs, rhs;
};

namespace {

using NodePtr = std::shared_ptr<const Expr::Node>;

class Parser {
 public:
  explicit Parser(const std::string& text) : m_text(text) {}

  Result<NodePtr> parse_all() {
    auto n = parse_binary(0);
    if (!n) return n;
    skip_ws();
    if (m_pos != m_text.size()) return fail("unexpected '" + m_text.substr(m_pos, 1) + "'");
    return n;
  }
  std::vector<std::string> names;

 private:
  // Precedence levels, lowest first.
  static const std::vector<std::vector<std::string>>& levels() {
    static const std::vector<std::vector<std::string>> l = {
        {"||"}, {"&&"}, {"==", "!="}, {"<=", ">=", "<", ">"}, {"+", "-"}, {"*", "/", "%"}};
    return l;
  }

  Error fail(const std::string& why) const {
    return make_error(ErrorCode::schema_error, "expression '" + m_text + "': " + why +
                                                   " at column " + std::to_string(m_pos + 1));
  }
  void skip_ws() {
    while (m_pos < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_pos]))) ++m_pos;
  }
  bool accept(const std::string& tok) {
    skip_ws();
    if (m_text.compare(m_pos, tok.size(), tok) == 0) {
      // "<" must not eat "<=", "=" forms are listed first in each level.
      m_pos += tok.size();
      return true;
    }
    return false;
  }

  Result<NodePtr> parse_binary(std::size_t level) {
    if (level == levels().size()) return parse_unary();
    auto lhs = parse_binary(level + 1);
    if (!lhs) return lhs;
    NodePtr left = *lhs;
    for (;;) {
      std::string matched;
      for (const auto& op : levels()[level]) {
        if (accept(op)) {
          matched = op;
          break;
        }
      }
      if (matched.empty()) return left;
      auto rhs = parse_binary(level + 1);
      if (!rhs) return rhs;
      auto n = std::make_shared<Expr::Node>();
      n->kind = Expr::Node::Kind::binary;
      n->op = matched;
      n->lhs = left;
      n->rhs = *rhs;
      left = n;
    }
  }

  Result<NodePtr> parse_unary() {
    if (accept("-") || accept("!")) {
      std::string op = m_text.substr(m_pos - 1, 1);
      auto inner = parse_unary();
      if (!inner) return inner;
      auto n = std::make_shared<Expr::Node>();
      n->kind = Expr::Node::Kind::unary;
      n->op = op;
      n->lhs = *inner;
      return NodePtr(n);
    }
    return parse_primary();
  }

  Result<NodePtr> parse_primary() {
    skip_ws();
    if (m_pos >= m_text.size()) return fail("unexpected end");
    char c = m_text[m_pos];
    if (c == '(') {
      ++m_pos;
      auto inner = parse_binary(0);
      if (!inner) return inner;
      if (!accept(")")) return fail("missing ')'");
      return inner;
    }
    auto n = std::make_shared<Expr::Node>();
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::int64_t v = 0;
      while (m_pos < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_pos]))) {
        v = v * 10 + (m_text[m_pos] - '0');
        if (v > (1LL << 50)) return fail("literal too large");
        ++m_pos;
      }
      n->kind = Expr::Node::Kind::literal;
      n->value = v;
      return NodePtr(n);
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t start = m_pos;
      while (m_pos < m_text.size() &&
             (std::isalnum(static_cast<unsigned char>(m_text[m_pos])) || m_text[m_pos] == '_'))
        ++m_pos;
      n->kind = Expr::Node::Kind::name;
      n->name = m_text.substr(start, m_pos - start);
      if (std::find(names.begin(), names.end(), n->name) == names.end()) names.push_back(n->name);
      if (accept("[")) {
        skip_ws();
        std::size_t s = m_pos;
        while (m_pos < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_pos]))) ++m_pos;
        if (s == m_pos) return fail("expected an index");
        // (std::stoi threw out_of_range past INT_MAX, which terminated the process: fuzz_schema)
        if (m_pos - s > 6) return fail("index too large");
        n->index = std::stoi(m_text.substr(s, m_pos - s));
        if (!accept("]")) return fail("missing ']'");
      }
      return NodePtr(n);
    }
    return fail(std::string("unexpected '") + c + "'");
  }

  const std::string& m_text;
  std::size_t m_pos = 0;
};

Result<std::int64_t> eval_node(const Expr::Node& n, const Expr::Lookup& lookup, const std::string& text) {
  using K = Expr::Node::Kind;
  switch (n.kind) {
    case K::literal: return n.value;
    case K::name: {
      auto v = lookup(n.name, n.index);
      if (!v) return make_error(ErrorCode::invalid_argument,
                                "expression '" + text + "': '" + n.name + "' has no value");
      return *v;
    }
    case K::unary: {
      GPUEMU_TRY(std::int64_t v, eval_node(*n.lhs, lookup, text));
      if (n.op == "-" && v == std::numeric_limits<std::int64_t>::min())
        return make_error(ErrorCode::invalid_argument,
                          "expression '" + text + "': -(" + std::to_string(v) +
                              ") overflows a 64-bit integer");
      return n.op == "-" ? -v : static_cast<std::int64_t>(v == 0);
    }
    case K::binary: {
      GPUEMU_TRY(std::int64_t a, eval_node(*n.lhs, lookup, text));
      if (n.op == "&&" && !a) return std::int64_t{0};
      if (n.op == "||" && a) return std::int64_t{1};
      GPUEMU_TRY(std::int64_t b, eval_node(*n.rhs, lookup, text));
      const std::string& op = n.op;
      // Dims come from requests (a pinned dim may be anything >= its minimum): arithmetic that
      // leaves int64 is an error, never a wrapped value that slips under a budget.
      std::int64_t r = 0;
      const bool overflow = op == "+"   ? __builtin_add_overflow(a, b, &r)
                            : op == "-" ? __builtin_sub_overflow(a, b, &r)
                            : op == "*" ? __builtin_mul_overflow(a, b, &r)
                                        : false;
      if (overflow)
        return make_error(ErrorCode::invalid_argument,
                          "expression '" + text + "': " + std::to_string(a) + " " + op + " " +
                              std::to_string(b) + " overflows a 64-bit integer");
      if (op == "+" || op == "-" || op == "*") return r;
      if (op == "/" || op == "%") {
        if (b == 0) return make_error(ErrorCode::invalid_argument,
                                      "expression '" + text + "': division by zero");
        if (a == std::numeric_limits<std::int64_t>::min() && b == -1)
          return make_error(ErrorCode::invalid_argument,
                            "expression '" + text + "': " + std::to_string(a) + " " + op +
                                " -1 overflows a 64-bit integer");
        return op == "/" ? a / b : a % b;
      }
      if (op == "==") return std::int64_t{a == b};
      if (op == "!=") return std::int64_t{a != b};
      if (op == "<") return std::int64_t{a < b};
      if (op == "<=") return std::int64_t{a <= b};
      if (op == ">") return std::int64_t{a > b};
      if (op == ">=") return std::int64_t{a >= b};
      if (op == "&&" || op == "||") return std::int64_t{b != 0};
      return make_error(ErrorCode::internal, "unknown operator " + op);
    }
  }
  return make_error(ErrorCode::internal, "bad expression node");
}

}  // namespace

Result<Expr> Expr::parse(const std::string& text) {
  Parser p(text);
  GPUEMU_TRY(NodePtr root, p.parse_all());
  Expr e;
  e.m_text = text;
  e.m_root = root;
  e.m_names = p.names;
  return e;
}

Result<std::int64_t> Expr::eval(const Lookup& lookup) const {
  if (!m_root) return make_error(ErrorCode::internal, "empty expression");
  return eval_node(*m_root, lookup, m_text);
}

}  // namespace gpuemu
