// Shape-class coverage: what fuzzing has exercised, per op: dtypes, value distributions, input
// layouts, and the shape classes of each dim (unit, partial tiles, full tiles, more than one block,
// long). Every fuzz run counts its cases here: Engine::fuzz into FuzzReport::coverage (in process:
// the CLI's --no-daemon, the Python module, tests; and the daemon's `fuzz`), the daemon's
// submit_outputs per submission. The daemon records each run's counters in the store; `coverage`
// (docs/protocol.md) sums them and names what was never exercised.
#pragma once

#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/op_schema.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace gpuemu {

// Adds one case to a run's coverage counters ({"dtypes": {...}, "distributions": {...},
// "layouts": {...}, "shapes": {dim: {class: n}}, "cases": n}).
void coverage_add(Json& coverage, const TestCase& c);
// Sums coverage counters.
void coverage_merge(Json& into, const Json& add);
// The classes a dim size belongs to.
std::vector<std::string> shape_classes(std::int64_t size);
// What `schema` allows that `coverage` has not exercised, and a percentage (the `coverage` reply's
// entry of one op, but for its `runs`).
Json coverage_report(const OpSchema& schema, const Json& coverage);

}  // namespace gpuemu
