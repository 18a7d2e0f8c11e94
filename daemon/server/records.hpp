// Turning engine results into stored failure records and back, and resolving the kernel a request
// names ({"kind": "builtin" | "script" | "client", ...}) into something the engine can run.
#pragma once

#include "daemon_context.hpp"

#include <gpuemu/engine/error_map.hpp>

#include <optional>

namespace gpuemu::server {

class RequestEngine;

// The runner of a kernel spec; `std::nullopt` for a client-side kernel (the daemon cannot run it).
// `re`: the request's engine, when it holds a custom op (its schema resolves script outputs).
Result<std::optional<KernelRunner>> resolve_kernel(const DaemonContext& ctx, const std::string& op,
                                                   const Json& kernel,
                                                   const RequestEngine* re = nullptr);
// The kernel identity stored with a failure (kind, name, file, line, script, function, framework).
Json kernel_identity(const Json& kernel);

// A failure record of a failing case: meta (docs/store.md) and the exact input snapshot.
// `re` adds what judged it (envelope_source) and a custom op's spec (RequestEngine::record_meta).
FailureRecord make_failure_record(const DaemonContext& ctx, const CaseResult& failure,
                                  const FuzzOptions& options, const Json& kernel,
                                  const Json& client, const RequestEngine* re = nullptr);
// The error map of a failure as stored in its meta (docs/store.md): `cells` row-major, each the
// largest normalised error of its cell with three significant digits, null for a non-finite
// mismatch.
Json error_map_json(const ErrorMap& map);
// A list item: id, op, seed, dtype, created_ms, max_error, bug_class, kernel, shapes, diagnosis.
Json failure_list_item(const FailureSummary& s);
// The stored case and the options it was generated under.
struct StoredCase {
  TestCase test_case;
  FuzzOptions options;
  Json meta;
};
Result<StoredCase> load_stored_case(const DaemonContext& ctx, const std::string& id);

// The JSON of a case result with its failure id and repro line filled in.
Json case_result_json(const CaseResult& r, const std::string& failure_id);

}  // namespace gpuemu::server
