// The error map of a stored failure (its meta's `error_map`, docs/store.md) as an inline SVG: one
// rectangle per cell over the output's last two dims, coloured by log10 of the normalised error;
// cool (grey to blue) up to the envelope, hot (orange to dark red) past it, magenta for a
// non-finite mismatch. A colour bar under the map marks the envelope with a black line. The map
// is framed in #112233 so a screenshot can find it (tests/python/test_report_browser.py).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace gpuemu::cli {

// The SVG element (no XML prolog: it is embedded in HTML); "" when `map` is not an error map.
std::string error_map_svg(const nlohmann::json& map);

// The cell colour of a normalised error under `envelope` on a scale whose top is `top`
// (log10 scale from 1e-3): "#rrggbb". Infinity (a non-finite mismatch) is magenta.
std::string error_map_colour(double error, double envelope, double top);

}  // namespace gpuemu::cli
