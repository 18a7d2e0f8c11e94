// Which stored failures are current, and where they belong. The store keeps every failure until
// it is deleted; a kernel that was fixed and fuzzed again must lose its squiggles. A failure is
// current until a later run of the same kernel and op that covers its dtype, from another session,
// is recorded: a daemon `fuzz` run is one session; a client's batches (`submit_outputs`, one run
// record each) belong to one session while they share the master seed and go on from where the
// previous batch stopped (a batch starting at or before the failure's batch is a new session).
// No protocol or I/O here: the daemon's `failures list` and `runs` replies in, groups out.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gpuemu::lsp {

using Json = nlohmann::json;

// A kernel's identity without its line (which moves as the file is edited):
// "client|FILE|NAME", "script|FILE|FUNCTION", "builtin||NAME".
std::string kernel_key(const Json& kernel);

// The current failures of one kernel, op and dtype.
struct FailureGroup {
  std::string kernel_key;
  Json kernel;  // the identity (kind, name, file, line, script, function)
  std::string op, dtype;
  std::vector<Json> failures;  // list items of `failures list`, the representative first
  const Json& representative() const { return failures.front(); }
};

// `failures`: the daemon's `failures list` items; `runs`: its `runs` (newest first or not).
std::vector<FailureGroup> current_failure_groups(const Json& failures, const Json& runs);

// The last status of each kernel and op from the run history: {kernel_key, op, status:
// "passed" | "failed", total, passed, started_ms, run_id} for the newest session of each.
struct KernelStatus {
  std::string kernel_key, op;
  bool passed = true;
  std::int64_t total = 0, passed_cases = 0, started_ms = 0;
  std::string run_id;
};
std::vector<KernelStatus> last_statuses(const Json& runs);

}  // namespace gpuemu::lsp
