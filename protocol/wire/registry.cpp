// The table of every method (gpuemu/protocol/wire/registry.hpp). A new method is one line here,
// its request and reply structs in its family's header and .cpp, and its handler.
#include "gpuemu/protocol/wire/registry.hpp"

#include "gpuemu/protocol/wire/coverage.hpp"
#include "gpuemu/protocol/wire/failures.hpp"
#include "gpuemu/protocol/wire/fuzz.hpp"
#include "gpuemu/protocol/wire/info.hpp"
#include "gpuemu/protocol/wire/lint.hpp"
#include "gpuemu/protocol/wire/scale.hpp"

namespace gpuemu::wire {
namespace {

template <class Request, class Reply>
MethodInfo method(std::string_view family, bool fast, std::string_view summary) {
  return {Request::k_method,
          family,
          fast,
          summary,
          [] { return fields_of(std::type_identity<Request>{}); },
          [] { return fields_of(std::type_identity<Reply>{}); }};
}

}  // namespace

// In the order hello has always listed them (progress, of the info family, after calibrate).
const std::vector<MethodInfo>& methods() {
  static const std::vector<MethodInfo> table = {
      method<HelloRequest, HelloReply>("info", true, "version, protocol and capability names"),
      method<PingRequest, PingReply>("info", true, "liveness"),
      method<StatsRequest, StatsReply>("info", true, "counters, uptime and the store's size"),
      method<ListOpsRequest, ListOpsReply>("info", false, "every op of the catalogue"),
      method<DescribeOpRequest, DescribeOpReply>("info", false,
                                                 "one op's schema, built-in kernels and envelopes"),
      method<ShutdownRequest, ShutdownReply>("info", true,
                                             "graceful stop: in-flight requests finish"),
      method<FuzzRequest, FuzzReply>(
          "fuzz", false, "fuzz an op against a built-in or script kernel; failures are stored"),
      method<GetTestBatchRequest, GetTestBatchReply>(
          "fuzz", false, "cases (inputs and attrs) for a client-side kernel"),
      method<SubmitOutputsRequest, SubmitOutputsReply>(
          "fuzz", false, "judge a client kernel's outputs for cases of a batch"),
      method<ValidateRequest, ValidateReply>("fuzz", false,
                                             "judge outputs for inputs the client chose"),
      method<CalibrateRequest, CalibrateReply>(
          "fuzz", false, "calibrate an op's envelopes from its correct controls"),
      method<ProgressRequest, ProgressReply>("info", true,
                                             "how far a request with a progress_token has got"),
      method<FailuresRequest, FailuresReply>("failures", false,
                                             "stored failures: list, get, delete, export, import"),
      method<PushRequest, PushReply>("failures", false,
                                     "take a worker daemon's failures and runs (idempotent)"),
      method<ReproduceRequest, ReproduceReply>(
          "failures", false, "re-run a stored failure from its bytes and from its seed"),
      method<MinimizeRequest, MinimizeReply>("failures", false,
                                             "shrink a stored failure; the result is stored too"),
      method<DiagnoseRequest, DiagnoseReply>("failures", false,
                                             "name the likely bug class of a stored failure"),
      method<LintRequest, LintReply>(
          "lint", false,
          "registers, spills and instruction mix of kernels, against a stored baseline"),
      method<BaselinesRequest, BaselinesReply>(
          "lint", false, "lint baselines in the store: list, get, put, delete"),
      method<RunsRequest, RunsReply>("coverage", false,
                                     "run history (newest first), each with its coverage"),
      method<CoverageRequest, CoverageReply>(
          "coverage", false, "what fuzzing has exercised per op, and what it has not"),
      method<CalibrationsRequest, CalibrationsReply>(
          "scale", false, "stored calibrations with their provenance: list, export, import"),
      method<OutboxRequest, OutboxReply>(
          "scale", false,
          "what this daemon has still to push to its central daemon: status, backlog, retry, "
          "rejected, wait"),
  };
  return table;
}

const MethodInfo* find_method(std::string_view name) {
  for (const auto& m : methods())
    if (m.name == name) return &m;
  return nullptr;
}

}  // namespace gpuemu::wire
