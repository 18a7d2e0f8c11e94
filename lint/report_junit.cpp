// JUnit XML: one test case per kernel (and per vanished baseline kernel); error findings are
// failures, warnings and notes go to the case's system-out.
#include "gpuemu/lint/report.hpp"
#include "gpuemu/base/xml_escape.hpp"

#include <map>
#include <sstream>

namespace gpuemu::lint {
namespace {

struct Case {
  std::string classname, name;
  std::vector<const Finding*> findings;
};

}  // namespace

std::string render_junit(const LintReport& report, const LintVerdict& verdict) {
  std::map<std::string, Case> cases;  // by "name@arch"
  std::vector<std::string> order;
  auto add_case = [&](const std::string& name, const std::string& arch, const std::string& shown) {
    std::string id = name + "@" + arch;
    if (!cases.count(id)) {
      cases[id] = Case{"gpuemu.lint." + (arch.empty() ? std::string("run") : arch), shown, {}};
      order.push_back(id);
    }
    return id;
  };
  for (const KernelMetrics& k : report.kernels)
    add_case(k.name, k.arch, k.demangled + (k.variant.empty() ? "" : " [" + k.variant + "]"));
  for (const Finding& f : verdict.findings)
    cases[add_case(f.kernel, f.arch, f.kernel.empty() ? "lint run" : f.kernel)].findings.push_back(
        &f);
  int failures = 0;
  for (const auto& [id, c] : cases)
    for (const Finding* f : c.findings)
      if (f->severity == Severity::error) {
        ++failures;
        break;
      }
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<testsuites name=\"gpuemu-lint\" tests=\"" << cases.size() << "\" failures=\"" << failures
      << "\">\n  <testsuite name=\"gpuemu-lint\" tests=\"" << cases.size() << "\" failures=\""
      << failures << "\" errors=\"0\" skipped=\"0\">\n";
  for (const std::string& id : order) {
    const Case& c = cases[id];
    out << "    <testcase classname=\"" << xml_escape(c.classname) << "\" name=\""
        << xml_escape(c.name) << "\">\n";
    std::string failure, other;
    for (const Finding* f : c.findings) {
      std::string line = "[" + f->rule + "] " + f->message + "\n";
      (f->severity == Severity::error ? failure : other) += line;
    }
    if (!failure.empty())
      out << "      <failure message=\"" << xml_escape(failure.substr(0, failure.find('\n')))
          << "\" type=\"regression\">" << xml_escape(failure) << "</failure>\n";
    if (!other.empty()) out << "      <system-out>" << xml_escape(other) << "</system-out>\n";
    out << "    </testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
  return out.str();
}

}  // namespace gpuemu::lint
