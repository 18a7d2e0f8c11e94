// The error map of a failing output: the normalised error (docs/error-model.md) of every output
// element laid over the output's last two dims, so the failing region shows at a glance (whole
// rows for a softmax whose normalisation is wrong, one column for a kernel that writes it wrong).
//
// Leading dims are folded by max (a batch of matrices shows the worst of each position); outputs
// larger than the map are max-pooled into cells of `cell_rows` x `cell_cols` elements, so a single
// bad element is never averaged away. A rank-1 output is one row, a scalar one cell. Infinity
// marks a non-finite mismatch (NaN where the reference is finite, or the reverse).
#pragma once

#include "gpuemu/engine/tensor.hpp"
#include "gpuemu/engine/verdict.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu {

struct ErrorMap {
  std::string output;                         // the output's name
  Shape shape;                                // the output's full shape
  std::int64_t rows = 1, cols = 1;            // the last two dims (rank 1: rows = 1; rank 0: 1 x 1)
  std::int64_t cell_rows = 1, cell_cols = 1;  // elements per cell of the map
  std::int64_t map_rows = 1, map_cols = 1;    // the map's size: ceil(rows / cell_rows), ...
  std::vector<double> cells;  // row-major, map_rows * map_cols: max normalised error per cell
  double envelope = 0.0;      // the bound the case was judged against
  double max_error = 0.0;     // the largest cell (infinity for a non-finite mismatch)
  std::int64_t over = 0;      // cells over the envelope
};

inline constexpr std::int64_t k_error_map_side = 64;  // default: at most 64 x 64 cells

// The map of one judged output (its `errors` and `shape` as `judge` filled them); nullopt when the
// output was not judged element by element (a shape or dtype mismatch, no errors kept).
std::optional<ErrorMap> make_error_map(const OutputVerdict& output, double envelope,
                                       std::int64_t max_rows = k_error_map_side,
                                       std::int64_t max_cols = k_error_map_side);

// The map of a verdict's first failing output (or of its worst one when none failed).
std::optional<ErrorMap> make_error_map(const Verdict& verdict,
                                       std::int64_t max_rows = k_error_map_side,
                                       std::int64_t max_cols = k_error_map_side);

}  // namespace gpuemu
