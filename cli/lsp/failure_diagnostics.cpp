#include "lsp/failure_diagnostics.hpp"

#include "lsp/kernel_locator.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace gpuemu::lsp {
namespace {

std::string str(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string number(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return "?";
  if (it->is_string()) return it->get<std::string>();  // "inf"
  if (!it->is_number()) return "?";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", it->get<double>());
  return buf;
}

std::string shapes_text(const Json& shapes) {
  std::string out;
  if (!shapes.is_object()) return out;
  for (const auto& [name, shape] : shapes.items()) {
    std::string dims;
    for (const auto& d : shape) dims += (dims.empty() ? "" : ", ") + d.dump();
    out += (out.empty() ? "" : " ") + name + "=[" + dims + "]";
  }
  return out;
}

// The [[op]] line (0-based) of gpuemu.toml that registers a built-in kernel of `op`.
std::optional<std::pair<std::string, Range>> builtin_place(const Json& kernel,
                                                           const std::string& op,
                                                           const Workspace& ws) {
  auto cfg = ws.config();
  if (!cfg) return std::nullopt;
  for (const auto& o : cfg->ops)
    if (o.op == op && !o.builtin.empty() && o.builtin == kernel.value("name", "")) {
      const int line = std::max(0, o.line - 1);
      return std::make_pair(cfg->file.string(), Range{{line, 0}, {line, 5}});
    }
  return std::nullopt;
}

}  // namespace

std::string failure_headline(const Json& f) {
  std::ostringstream os;
  os << str(f, "op") << " " << str(f, "dtype") << " seed " << str(f, "seed");
  const std::string shapes = shapes_text(f.value("shapes", Json::object()));
  if (!shapes.empty()) os << " " << shapes;
  os << ": max error " << number(f, "max_error") << " > envelope " << number(f, "envelope");
  return os.str();
}

std::vector<PlacedGroup> place_groups(std::vector<FailureGroup> groups, const Workspace& ws) {
  std::vector<PlacedGroup> out;
  for (auto& g : groups) {
    PlacedGroup p{std::move(g), "", std::nullopt};
    const Json& k = p.group.kernel;
    const std::string kind = k.value("kind", "");
    if (kind == "builtin") {
      if (auto place = builtin_place(k, p.group.op, ws)) {
        p.path = place->first;
        p.range = place->second;
      }
    } else {
      std::string file = str(k, "file");
      if (file.empty()) file = str(k, "script");
      std::string name = str(k, "function");
      if (name.empty()) name = str(k, "name");
      if (!file.empty()) {
        p.path = file;
        const int line =
            k.contains("line") && k["line"].is_number_integer() ? k["line"].get<int>() : 0;
        p.range = locate_def(ws.text(file), name, line);
        if (!p.range && line > 0) p.range = Range{{line - 1, 0}, {line - 1, 1000}};
        if (!p.range) p.range = Range{{0, 0}, {0, 1000}};
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

Diagnostic failure_diagnostic(const PlacedGroup& p) {
  const Json& f = p.group.representative();
  const Json diag = f.value("diagnosis", Json::object());
  Diagnostic d;
  d.range = p.range.value_or(Range{});
  d.severity = Severity::error;
  d.code = str(f, "bug_class");
  std::ostringstream msg;
  msg << "gpuemu: " << failure_headline(f);
  const std::string summary = str(diag, "summary");
  msg << "\ndiagnosis: " << (d.code.empty() ? "no_pattern" : d.code)
      << (summary.empty() ? "" : ": " + summary);
  const std::size_t n = p.group.failures.size();
  msg << "\n"
      << n << " failing case" << (n == 1 ? "" : "s") << " of "
      << p.group.kernel.value("name", p.group.kernel.value("function", std::string("kernel")))
      << "; repro: gpuemu repro " << str(f, "id");
  d.message = msg.str();
  Json ids = Json::array();
  for (std::size_t i = 0; i < n && i < 50; ++i) ids.push_back(p.group.failures[i].value("id", ""));
  d.data = {{"failure_id", f.value("id", "")},
            {"failure_ids", ids},
            {"count", n},
            {"op", p.group.op},
            {"dtype", p.group.dtype},
            {"seed", str(f, "seed")},  // seeds are 64-bit: text, so JavaScript keeps every digit
            {"master_seed", str(f, "master_seed")},
            {"index", f.value("index", Json())},
            {"shapes", f.value("shapes", Json::object())},
            {"max_error", f.value("max_error", Json())},
            {"envelope", f.value("envelope", Json())},
            {"bug_class", d.code},
            {"kernel", p.group.kernel}};
  return d;
}

std::map<std::string, std::vector<Diagnostic>> failure_diagnostics(
    const std::vector<PlacedGroup>& groups) {
  std::map<std::string, std::vector<Diagnostic>> out;
  for (const auto& g : groups)
    if (!g.path.empty() && g.range) out[g.path].push_back(failure_diagnostic(g));
  return out;
}

Json failures_view(const std::vector<PlacedGroup>& groups) {
  Json out = Json::array();
  for (const auto& p : groups) {
    Json g = {{"op", p.group.op},
              {"dtype", p.group.dtype},
              {"kernel", p.group.kernel},
              {"failures", Json::array()}};
    if (!p.path.empty()) g["uri"] = path_to_uri(p.path);
    if (p.range) g["range"] = to_json(*p.range);
    for (const auto& f : p.group.failures) {
      const Json diag = f.value("diagnosis", Json::object());
      g["failures"].push_back({{"id", f.value("id", "")},
                               {"seed", str(f, "seed")},
                               {"dtype", f.value("dtype", Json())},
                               {"shapes", f.value("shapes", Json::object())},
                               {"max_error", f.value("max_error", Json())},
                               {"envelope", f.value("envelope", Json())},
                               {"message", f.value("message", Json())},
                               {"bug_class", f.value("bug_class", Json())},
                               {"summary", diag.value("summary", Json())},
                               {"created_ms", f.value("created_ms", Json())},
                               {"headline", failure_headline(f)}});
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace gpuemu::lsp
