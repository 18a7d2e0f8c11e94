// Escaping text for XML attributes and bodies (JUnit, SARIF's HTML sibling, the HTML report): the
// one implementation the CLI's report writers and the lint's JUnit writer share.
#pragma once

#include <string>
#include <string_view>

namespace gpuemu {

// &amp; &lt; &gt; &quot; and &#39; (valid in XML 1.0 and in HTML, where &apos; is not in HTML 4);
// control characters XML 1.0 forbids even as references (all below 0x20 but tab, newline and
// carriage return) become '?'.
inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t' && ch != '\r')
          out += '?';
        else
          out += ch;
    }
  }
  return out;
}

}  // namespace gpuemu
