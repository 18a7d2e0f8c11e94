#include "error_map_svg.hpp"

#include <gpuemu/base/xml_escape.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace gpuemu::cli {
namespace {

using Json = nlohmann::json;

constexpr double k_floor_log = -3.0;  // errors below 1e-3 get the palest colour
constexpr int k_max_width = 640, k_max_height = 400, k_max_cell = 16, k_min_cell = 2;

struct Rgb {
  double r, g, b;
};

Rgb mix(Rgb a, Rgb b, double t) {
  t = std::clamp(t, 0.0, 1.0);
  return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}

std::string hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround(c.r)),
                static_cast<int>(std::lround(c.g)), static_cast<int>(std::lround(c.b)));
  return buf;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

double log_of(double v) {
  return v > 0 ? std::max(k_floor_log, std::log10(v)) : k_floor_log;
}

}  // namespace

std::string error_map_colour(double error, double envelope, double top) {
  if (!std::isfinite(error)) return "#d000d0";
  const double le = log_of(envelope), lt = std::max(log_of(top), le + 1.0), lv = log_of(error);
  if (error <= envelope)  // cool: pale grey at 1e-3 to steel blue at the envelope
    return hex(mix({238, 241, 245}, {60, 110, 180}, (lv - k_floor_log) / (le - k_floor_log)));
  // hot: orange just past the envelope to dark red at the top of the scale
  const double t = (lv - le) / (lt - le);
  return t < 0.5 ? hex(mix({255, 170, 40}, {230, 60, 20}, t * 2))
                 : hex(mix({230, 60, 20}, {120, 0, 10}, (t - 0.5) * 2));
}

std::string error_map_svg(const Json& map) {
  if (!map.is_object() || !map.contains("cells") || !map["cells"].is_array() ||
      !map.contains("size") || !map["size"].is_array() || map["size"].size() != 2)
    return "";
  const auto rows = map["size"][0].get<std::int64_t>(), cols = map["size"][1].get<std::int64_t>();
  const Json& cells = map["cells"];
  if (rows < 1 || cols < 1 || static_cast<std::int64_t>(cells.size()) != rows * cols) return "";
  const double envelope = map.value("envelope", 2.0);
  double top = envelope * 10;
  for (const auto& c : cells)
    if (c.is_number()) top = std::max(top, c.get<double>());
  const int cell = static_cast<int>(std::clamp<std::int64_t>(
      std::min<std::int64_t>(k_max_width / cols, k_max_height / rows), k_min_cell, k_max_cell));
  const int left = 8, top_margin = 8, frame = 2;
  const int map_w = static_cast<int>(cols) * cell, map_h = static_cast<int>(rows) * cell;
  const int bar_y = top_margin + map_h + 2 * frame + 34, bar_w = std::max(map_w, 320), bar_h = 12;
  const int width = left + std::max(map_w + 2 * frame, bar_w) + 120;
  const int height = bar_y + bar_h + 40;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"error-map\" width=\"" << width
     << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
     << "\" shape-rendering=\"crispEdges\" font-family=\"sans-serif\" font-size=\"11\" "
        "fill=\"#333\">\n";
  os << "<title>normalised error of output '" << xml_escape(map.value("output", std::string()))
     << "' over its last two dims (log scale; envelope " << num(envelope) << ")</title>\n";
  // The frame (#112233), then the cells inside it.
  os << "<rect x=\"" << left << "\" y=\"" << top_margin << "\" width=\"" << map_w + 2 * frame
     << "\" height=\"" << map_h + 2 * frame << "\" fill=\"#112233\"/>\n<g class=\"cells\">";
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const Json& v = cells[static_cast<std::size_t>(r * cols + c)];
      const double e = v.is_number() ? v.get<double>() : std::numeric_limits<double>::infinity();
      os << "<rect x=\"" << left + frame + c * cell << "\" y=\"" << top_margin + frame + r * cell
         << "\" width=\"" << cell << "\" height=\"" << cell << "\" fill=\""
         << error_map_colour(e, envelope, top) << "\"/>";
    }
  os << "</g>\n";
  // Axis notes: what a row and a column of the map are.
  const Json cell_size = map.value("cell", Json::array({1, 1}));
  const Json shape = map.value("shape", Json::array());
  std::ostringstream note;
  note << "rows: dim -2 (" << map.value("rows", 1) << "), cols: dim -1 (" << map.value("cols", 1)
       << ")";
  if (cell_size.is_array() && cell_size.size() == 2 &&
      (cell_size[0].get<std::int64_t>() > 1 || cell_size[1].get<std::int64_t>() > 1))
    note << ", each cell the max of " << cell_size[0] << "x" << cell_size[1] << " elements";
  if (shape.size() > 2) note << ", max over the leading dims of " << shape.dump();
  os << "<text x=\"" << left << "\" y=\"" << top_margin + map_h + 2 * frame + 16 << "\">"
     << xml_escape(note.str()) << "</text>\n";
  // The colour bar: log10 from 1e-3 to the top, the envelope marked.
  const double lo = k_floor_log, hi = std::max(log_of(top), log_of(envelope) + 1.0);
  const int steps = 64;
  for (int i = 0; i < steps; ++i) {
    const double lv = lo + (hi - lo) * (i + 0.5) / steps;
    os << "<rect x=\"" << left + i * bar_w / steps << "\" y=\"" << bar_y << "\" width=\""
       << bar_w / steps + 1 << "\" height=\"" << bar_h << "\" fill=\""
       << error_map_colour(std::pow(10.0, lv), envelope, top) << "\"/>";
  }
  const int env_x = left + static_cast<int>((log_of(envelope) - lo) / (hi - lo) * bar_w);
  os << "\n<line class=\"envelope\" x1=\"" << env_x << "\" x2=\"" << env_x << "\" y1=\""
     << bar_y - 4 << "\" y2=\"" << bar_y + bar_h + 4 << "\" stroke=\"#000\" stroke-width=\"2\"/>\n"
     << "<text x=\"" << env_x << "\" y=\"" << bar_y - 6 << "\" text-anchor=\"middle\">envelope "
     << num(envelope) << "</text>\n"
     << "<text x=\"" << left << "\" y=\"" << bar_y + bar_h + 14 << "\">1e-3</text>\n"
     << "<text x=\"" << left + bar_w << "\" y=\"" << bar_y + bar_h + 14 << "\" text-anchor=\"end\">"
     << num(std::pow(10.0, hi)) << "</text>\n"
     << "<rect x=\"" << left + bar_w + 12 << "\" y=\"" << bar_y << "\" width=\"" << bar_h
     << "\" height=\"" << bar_h << "\" fill=\"#d000d0\"/><text x=\"" << left + bar_w + 28
     << "\" y=\"" << bar_y + bar_h - 2 << "\">NaN/Inf</text>\n</svg>\n";
  return os.str();
}

}  // namespace gpuemu::cli
