// What fuzzing has exercised, per op: dtypes, value distributions, input layouts, and shape classes
// of each dim (unit, partial tiles, full tiles, more than one block, long). Recorded with every run
// in the store; `coverage` aggregates the runs and names what was never exercised.
#pragma once

#include "daemon_context.hpp"

namespace gpuemu::server {

// Adds one case to a run's coverage counters ({"dtypes": {...}, "distributions": {...},
// "layouts": {...}, "shapes": {dim: {class: n}}, "cases": n}).
void coverage_add(Json& coverage, const TestCase& c);
// Sums coverage counters.
void coverage_merge(Json& into, const Json& add);
// The classes a dim size belongs to.
std::vector<std::string> shape_classes(std::int64_t size);
// What `schema` allows that `coverage` has not exercised, and a percentage.
Json coverage_report(const OpSchema& schema, const Json& coverage);

void add_coverage_handlers(HandlerTable& out);

}  // namespace gpuemu::server
