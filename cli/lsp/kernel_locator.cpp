#include "lsp/kernel_locator.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpuemu::lsp {
namespace {

// The column of NAME when `line` is "[async ]def NAME(" after indentation; -1 otherwise.
int def_column(const std::string& line, const std::string& name) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos) return -1;
  if (line.compare(i, 6, "async ") == 0) i = line.find_first_not_of(" \t", i + 6);
  if (i == std::string::npos || line.compare(i, 4, "def ") != 0) return -1;
  i = line.find_first_not_of(" \t", i + 4);
  if (i == std::string::npos || line.compare(i, name.size(), name) != 0) return -1;
  const std::size_t after = line.find_first_not_of(" \t", i + name.size());
  if (after == std::string::npos || line[after] != '(') return -1;
  return static_cast<int>(i);
}

}  // namespace

std::optional<Range> locate_def(const std::string& text, const std::string& name,
                                int recorded_line) {
  std::string short_name = name;
  if (const auto dot = short_name.rfind('.'); dot != std::string::npos)
    short_name = short_name.substr(dot + 1);
  if (short_name.empty() || short_name == "<lambda>") return std::nullopt;
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(std::move(l));
  }
  const int start = std::max(0, recorded_line - 1);
  int best = -1, best_col = -1, best_distance = 1 << 30;
  for (int n = 0; n < static_cast<int>(lines.size()); ++n) {
    const int col = def_column(lines[static_cast<std::size_t>(n)], short_name);
    if (col < 0) continue;
    // At or after the recorded line (past its decorators) before anything above it.
    const int distance = n >= start ? n - start : (start - n) + 100000;
    if (distance < best_distance) {
      best = n;
      best_col = col;
      best_distance = distance;
    }
  }
  if (best < 0) return std::nullopt;
  return Range{{best, best_col}, {best, best_col + static_cast<int>(short_name.size())}};
}

std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace gpuemu::lsp
