// Integer expressions in schemas: derived dims ("Cin / groups"), shapes, value domains
// ("indices:V") and constraints ("H % Hkv == 0", "L + 2*padding >= dilation*(K-1)+1").
// Grammar: || && == != < <= > >= + - * / % unary - ! parentheses, integer literals, names, and
// name[i] (an element of an int-list attr; a plain int is its own every element).
#pragma once

#include "gpuemu/base/error.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu {

class Expr {
 public:
  // Looks a name up; index is -1 for a plain name, else the [i] subscript.
  using Lookup = std::function<std::optional<std::int64_t>(const std::string& name, int index)>;

  static Result<Expr> parse(const std::string& text);
  Result<std::int64_t> eval(const Lookup& lookup) const;
  const std::vector<std::string>& names() const { return m_names; }  // identifiers it reads
  const std::string& text() const { return m_text; }

  struct Node;

 private:
  std::string m_text;
  std::shared_ptr<const Node> m_root;
  std::vector<std::string> m_names;
};

}  // namespace gpuemu
