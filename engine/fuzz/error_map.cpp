#include "gpuemu/engine/error_map.hpp"

#include <algorithm>
#include <cmath>

namespace gpuemu {

std::optional<ErrorMap> make_error_map(const OutputVerdict& output, double envelope,
                                       std::int64_t max_rows, std::int64_t max_cols) {
  const std::int64_t numel = shape_numel(output.shape);
  if (output.errors.empty() || static_cast<std::int64_t>(output.errors.size()) != numel ||
      numel == 0 || max_rows < 1 || max_cols < 1)
    return std::nullopt;
  ErrorMap m;
  m.output = output.name;
  m.shape = output.shape;
  m.envelope = envelope;
  const std::size_t rank = output.shape.size();
  m.cols = rank >= 1 ? output.shape[rank - 1] : 1;
  m.rows = rank >= 2 ? output.shape[rank - 2] : 1;
  m.cell_rows = (m.rows + max_rows - 1) / max_rows;
  m.cell_cols = (m.cols + max_cols - 1) / max_cols;
  m.map_rows = (m.rows + m.cell_rows - 1) / m.cell_rows;
  m.map_cols = (m.cols + m.cell_cols - 1) / m.cell_cols;
  m.cells.assign(static_cast<std::size_t>(m.map_rows * m.map_cols), 0.0);
  const std::int64_t plane = m.rows * m.cols;
  for (std::int64_t e = 0; e < numel; ++e) {
    const std::int64_t within = e % plane;
    const std::int64_t r = within / m.cols, c = within % m.cols;
    double& cell =
        m.cells[static_cast<std::size_t>((r / m.cell_rows) * m.map_cols + c / m.cell_cols)];
    const double err = output.errors[static_cast<std::size_t>(e)];
    if (err > cell || std::isnan(err)) cell = std::isnan(err) ? INFINITY : err;
  }
  for (double v : m.cells) {
    m.max_error = std::max(m.max_error, v);
    if (v > envelope) ++m.over;
  }
  return m;
}

std::optional<ErrorMap> make_error_map(const Verdict& verdict, std::int64_t max_rows,
                                       std::int64_t max_cols) {
  const OutputVerdict* pick = nullptr;
  for (const auto& o : verdict.outputs)
    if (!o.passed && !o.errors.empty()) {
      pick = &o;
      break;
    }
  if (pick == nullptr)
    for (const auto& o : verdict.outputs)
      if (!o.errors.empty() && (pick == nullptr || o.max_error > pick->max_error)) pick = &o;
  if (pick == nullptr) return std::nullopt;
  return make_error_map(*pick, verdict.envelope, max_rows, max_cols);
}

}  // namespace gpuemu
