// The numbers a report shows beside its failures: pass rates per op and dtype, and how many cases
// each run took to its first failure. Computed once into the report document (`pass_rates`,
// `first_failures`, docs/ci.md); every format renders them from there.
#pragma once

#include <nlohmann/json.hpp>

namespace gpuemu::cli {

// [{op, dtype, runs, cases, passed, rate}] sorted by op, dtype, from the daemon's run records
// (`runs`: each with op, total, passed and, since the editor release, by_dtype {dtype: {total,
// passed}}; an older record without by_dtype counts under dtype "*").
nlohmann::json pass_rates_from_runs(const nlohmann::json& runs);

// The daemon's run records with the two parts of a Python client's backward=True run made one:
// each record of its forward (part_of {part: "forward", run}) counts a case failed when its output
// or any gradient failed, in the records of its gradients (part_of {part: "gradients", run}, the
// same `run`: the backward run's id) at the same case indices (the two parts' case i share the
// case seed). Such a record gains `forward` {total, passed} (its own counts), `gradients` {op, run, total, passed, failed}
// and `backward: true`; its passed, first_failure, by_dtype and failure_ids are the case's. The
// gradients' records stay as they are (op <op>_backward). Records of no such run are unchanged.
nlohmann::json join_backward_parts(const nlohmann::json& runs);
// The same from a `gpuemu ci` document's results (op, dtype, cases, failed_cases).
nlohmann::json pass_rates_from_results(const nlohmann::json& results);

// [{id, time_ms, op, kernel, total, first_failure, cases_to_first_failure}] of the runs (newest
// first) that failed: cases_to_first_failure = first_failure + 1 (case indices start at 0).
nlohmann::json first_failures_from_runs(const nlohmann::json& runs);
// The same from a `gpuemu ci` document's failed results (their failure's case index).
nlohmann::json first_failures_from_results(const nlohmann::json& results);

}  // namespace gpuemu::cli
