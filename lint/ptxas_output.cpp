#include "ptxas_output.hpp"

#include <cctype>
#include <charconv>

namespace gpuemu::lint {
namespace {

// The integer that ends right before `suffix` in `line` ("80" in "Used 80 registers").
std::optional<std::int64_t> number_before(std::string_view line, std::string_view suffix) {
  std::size_t at = line.find(suffix);
  if (at == std::string_view::npos) return std::nullopt;
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  if (begin == end) return std::nullopt;
  std::int64_t value = 0;
  auto [ptr, ec] = std::from_chars(line.data() + begin, line.data() + end, value);
  if (ec != std::errc{}) return std::nullopt;
  return value;
}

// The text between the first pair of single quotes after `after` in `line`.
std::string quoted_after(std::string_view line, std::string_view after, std::size_t nth = 0) {
  std::size_t at = line.find(after);
  if (at == std::string_view::npos) return {};
  std::size_t open = at + after.size();
  for (std::size_t i = 0;; ++i) {
    open = line.find('\'', open);
    if (open == std::string_view::npos) return {};
    std::size_t close = line.find('\'', open + 1);
    if (close == std::string_view::npos) return {};
    if (i == nth) return std::string(line.substr(open + 1, close - open - 1));
    open = close + 1;
  }
}

std::string trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::map<std::string, PtxasKernelInfo> parse_ptxas_output(std::string_view text) {
  std::map<std::string, PtxasKernelInfo> kernels;
  std::string compiling;   // the entry whose "Used ..." line comes next
  std::string properties;  // the function whose "stack frame" line comes next
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find("Compiling entry function") != std::string_view::npos) {
      compiling = quoted_after(line, "Compiling entry function");
      properties.clear();
      if (!compiling.empty()) kernels[compiling].arch = quoted_after(line, "for");
    } else if (std::size_t at = line.find("Function properties for ");
               at != std::string_view::npos) {
      properties = trimmed(line.substr(at + 24));
    } else if (line.find("bytes stack frame") != std::string_view::npos) {
      auto it = kernels.find(properties);
      if (properties.empty() || it == kernels.end()) continue;  // not an entry
      it->second.stack_frame_bytes = number_before(line, "bytes stack frame");
      it->second.spill_store_bytes = number_before(line, "bytes spill stores");
      it->second.spill_load_bytes = number_before(line, "bytes spill loads");
    } else if (line.find("Used ") != std::string_view::npos &&
               line.find(" registers") != std::string_view::npos) {
      auto it = kernels.find(compiling);
      if (compiling.empty() || it == kernels.end()) continue;
      it->second.registers = number_before(line, " registers");
      it->second.barriers = number_before(line, " barriers");
      it->second.shared_bytes = number_before(line, " bytes smem").value_or(0);
    }
  }
  return kernels;
}

std::string parse_tool_version(std::string_view version_text) {
  std::size_t at = version_text.find(", V");
  if (at == std::string_view::npos) return {};
  std::size_t begin = at + 3, end = begin;
  while (end < version_text.size() &&
         (std::isdigit(static_cast<unsigned char>(version_text[end])) || version_text[end] == '.'))
    ++end;
  return std::string(version_text.substr(begin, end - begin));
}

}  // namespace gpuemu::lint
