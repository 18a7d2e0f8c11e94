// The fields of the fuzz family's messages (gpuemu/protocol/wire/fuzz.hpp), in the order the
// daemon checks them.
#include "gpuemu/protocol/wire/fuzz.hpp"

namespace gpuemu::wire {

template <class M, class S>
void FuzzRequest::map(M& m, S& s) {
  m.required("op", s.op);
  m.opt("options", s.options);
  m.seed("seed", s.seed);
  m.opt("iterations", s.iterations);
  m.opt("start_index", s.start_index);
  m.opt("fail_fast", s.fail_fast);
  m.opt("diagnose_limit", s.diagnose_limit);
  m.opt("minimize", s.minimize);
  m.opt("store", s.store);
  m.opt("repro_prefix", s.repro_prefix);
  m.opt("kernel", s.kernel);
  m.opt("client", s.client);
  m.opt("custom_op", s.custom_op);
  m.opt("envelope", s.envelope);
  m.opt("progress_token", s.progress_token);
}

template <class M, class S>
void FuzzReply::map(M& m, S& s) {
  m.rest(s.report);
  m.opt("failures", s.failures);
  m.opt("failure_ids", s.failure_ids);
  m.opt("failures_not_described", s.failures_not_described);
  m.opt("minimized", s.minimized);
  m.opt("kernel", s.kernel);
  m.opt("options", s.options);
  m.opt("envelope", s.envelope);
  m.opt("custom_op", s.custom_op);
  m.opt("run_id", s.run_id);
}

gpuemu::FuzzRequest engine_request(const FuzzRequest& r, std::uint64_t seed) {
  gpuemu::FuzzRequest e;
  e.op = r.op;
  e.options = r.options;
  e.seed = seed;
  e.iterations = r.iterations;
  e.start_index = r.start_index;
  e.fail_fast = r.fail_fast;
  e.diagnose_limit = r.diagnose_limit;
  e.repro_prefix = r.repro_prefix;
  e.minimize = r.minimize ? 1 : 0;
  return e;
}

template <class M, class S>
void RunSpec::map(M& m, S& s) {
  m.opt("iterations", s.iterations);
  m.opt("fail_fast", s.fail_fast);
  m.opt("diagnose_limit", s.diagnose_limit);
  m.opt("repro_prefix", s.repro_prefix);
}

template <class M, class S>
void GetTestBatchRequest::map(M& m, S& s) {
  m.required("op", s.op);
  m.opt("options", s.options);
  m.opt("count", s.count);
  m.opt("start_index", s.start_index);
  m.seed("seed", s.seed);
  m.opt("prefetch", s.prefetch);
  m.opt("digests", s.digests);
  m.opt("custom_op", s.custom_op);
  m.opt("envelope", s.envelope);
  m.opt("run", s.run, "'run' must be an object {iterations, fail_fast, diagnose_limit, repro_prefix}");
}

template <class M, class S>
void CaseBatch::map(M& m, S& s) {
  m.opt("op", s.op);
  m.opt("master_seed", s.master_seed);
  m.opt("cases", s.cases);
  m.opt("options", s.options);
  m.opt("run_id", s.run_id);
}

template <class M, class S>
void NextBatch::map(M& m, S& s) {
  m.opt("count", s.count);
  m.opt("start_index", s.start_index);
  m.seed("seed", s.seed);
  m.opt("prefetch", s.prefetch);
  m.opt("digests", s.digests);
  m.opt("options", s.options);
}

template <class M, class S>
void SubmitItem::map(M& m, S& s) {
  m.opt("case", s.case_json);
  m.opt("kernel_error", s.kernel_error);
  m.opt("contract_error", s.contract_error);
  m.opt("kernel", s.kernel);
  m.opt("diagnosis", s.diagnosis);
}

template <class M, class S>
void SubmitOutputsRequest::map(M& m, S& s) {
  m.required("op", s.op);
  m.opt("options", s.options);
  m.opt("store", s.store);
  m.opt("hold_for_diagnosis", s.hold_for_diagnosis);
  m.opt("hold_by_id", s.hold_by_id);
  m.opt("snapshots", s.snapshots);
  m.opt("held_id", s.held_id);
  m.opt("next", s.next, "'next' must be an object {count, start_index, seed}");
  m.opt("kernel", s.kernel);
  m.opt("client", s.client);
  m.opt("custom_op", s.custom_op);
  m.opt("envelope", s.envelope);
  m.opt("items", s.items, "'items' must be a non-empty array");
  m.opt("diagnoses", s.diagnoses);
  m.opt("run_id", s.run_id);
  m.opt("part_of", s.part_of);
}

template <class M, class S>
void SubmitOutputsReply::map(M& m, S& s) {
  m.opt("op", s.op);
  m.opt("results", s.results);
  m.opt("held", s.held);
  m.opt("held_id", s.held_id);
  m.opt("next", s.next);
  m.opt("run", s.run);
}

template <class M, class S>
void ValidateRequest::map(M& m, S& s) {
  m.required("op", s.op);
  m.opt("attrs", s.attrs);
  m.opt("dtype", s.dtype);
  m.opt("custom_op", s.custom_op);
  m.opt("envelope", s.envelope);
}

template <class M, class S>
void ValidateReply::map(M& m, S& s) {
  m.rest(s.verdict);
}

template <class M, class S>
void CalibrateRequest::map(M& m, S& s) {
  m.required("op", s.op);
  m.opt("dtypes", s.dtypes);
  m.opt("cases", s.cases);
  m.opt("seed", s.seed);
  m.opt("apply", s.apply);
  m.opt("controls", s.controls, "'controls' must be an array of kernel specs");
  m.opt("custom_op", s.custom_op);
  m.opt("progress_token", s.progress_token);
}

template <class M, class S>
void CalibrateReply::map(M& m, S& s) {
  m.opt("op", s.op);
  m.opt("applied", s.applied);
  m.opt("results", s.results);
}

GPUEMU_WIRE_DEFINE_REQUEST(FuzzRequest)
GPUEMU_WIRE_DEFINE_REPLY(FuzzReply)
GPUEMU_WIRE_DEFINE_REQUEST(GetTestBatchRequest)
GPUEMU_WIRE_DEFINE_REPLY(CaseBatch)
GPUEMU_WIRE_DEFINE_REQUEST(NextBatch)
GPUEMU_WIRE_DEFINE_REQUEST(RunSpec)
GPUEMU_WIRE_DEFINE_REQUEST(SubmitItem)
GPUEMU_WIRE_DEFINE_REQUEST(SubmitOutputsRequest)
GPUEMU_WIRE_DEFINE_REPLY(SubmitOutputsReply)
GPUEMU_WIRE_DEFINE_REQUEST(ValidateRequest)
GPUEMU_WIRE_DEFINE_REPLY(ValidateReply)
GPUEMU_WIRE_DEFINE_REQUEST(CalibrateRequest)
GPUEMU_WIRE_DEFINE_REPLY(CalibrateReply)

}  // namespace gpuemu::wire
