// The fields of the failures family's messages (gpuemu/protocol/wire/failures.hpp).
#include "gpuemu/protocol/wire/failures.hpp"

namespace gpuemu::wire {

template <class M, class S>
void FailuresRequest::map(M& m, S& s) {
  m.opt("action", s.action);
  m.opt("id", s.id, "the request needs a string 'id'");
  m.opt("op", s.op);
  m.opt("since_ms", s.since_ms);
  m.opt("limit", s.limit);
  m.opt("offset", s.offset);
  m.opt("snapshot", s.snapshot);
  m.opt("records", s.records);
}

std::vector<std::string_view> FailuresRequest::unread_fields(const Json& params) {
  const std::string action = action_of(params, "list");
  if (action == "list" || action == "export") return {"id", "snapshot", "records"};
  if (action == "import") return {"id", "op", "since_ms", "limit", "offset", "snapshot"};
  if (action == "get") return {"op", "since_ms", "limit", "offset", "records"};
  return {"op", "since_ms", "limit", "offset", "snapshot", "records"};  // delete, or unknown
}

template <class M, class S>
void FailuresReply::map(M& m, S& s) {
  m.rest(s.record);
  m.opt("failures", s.failures);
  m.opt("records", s.records);
  m.opt("count", s.count);
  m.opt("truncated", s.truncated);
  m.opt("matching", s.matching);
  m.opt("next_offset", s.next_offset);
  m.opt("imported", s.imported);
  m.opt("present", s.present);
  m.opt("deleted", s.deleted);
}

template <class M, class S>
void PushRequest::map(M& m, S& s) {
  m.opt("records", s.records);
  m.opt("runs", s.runs);
  m.opt("origin", s.origin);
}

template <class M, class S>
void PushReply::map(M& m, S& s) {
  m.opt("failures", s.failures);
  m.opt("runs", s.runs);
}

template <class M, class S>
void ReproduceRequest::map(M& m, S& s) {
  m.required("id", s.id);
}

template <class M, class S>
void ReproduceReply::map(M& m, S& s) {
  m.opt("id", s.id);
  m.opt("op", s.op);
  m.opt("seed", s.seed);
  m.opt("snapshot_bytes", s.snapshot_bytes);
  m.opt("regenerated_identical", s.regenerated_identical);
  m.opt("regeneration", s.regeneration);
  m.opt("kernel", s.kernel);
  m.opt("case", s.case_json);
  m.opt("passed", s.passed);
  m.opt("verdict", s.verdict);
  m.opt("message", s.message);
  m.opt("max_error", s.max_error);
  m.opt("still_fails", s.still_fails);
  m.opt("envelope_source", s.envelope_source);
}

template <class M, class S>
void MinimizeRequest::map(M& m, S& s) {
  m.required("id", s.id);
  m.opt("max_evaluations", s.max_evaluations);
}

template <class M, class S>
void MinimizeReply::map(M& m, S& s) {
  m.rest(s.minimized);
  m.opt("id", s.id);
  m.opt("minimized_id", s.minimized_id);
  m.opt("repro", s.repro);
}

template <class M, class S>
void DiagnoseRequest::map(M& m, S& s) {
  m.required("id", s.id);
}

template <class M, class S>
void DiagnoseReply::map(M& m, S& s) {
  m.opt("id", s.id);
  m.opt("diagnosis", s.diagnosis);
  m.opt("rerun", s.rerun);
  m.opt("passed", s.passed);
}

FailuresRequest failures_list(std::string op, std::size_t limit) {
  FailuresRequest r;
  r.op = std::move(op);
  r.limit = limit;
  return r;
}

FailuresRequest failures_get(std::string id) {
  FailuresRequest r;
  r.action = "get";
  r.id = std::move(id);
  return r;
}

FailuresRequest failures_delete(std::string id) {
  FailuresRequest r = failures_get(std::move(id));
  r.action = "delete";
  return r;
}

FailuresRequest failures_export(std::string op, std::size_t offset) {
  FailuresRequest r;
  r.action = "export";
  r.op = std::move(op);
  r.offset = offset;
  return r;
}

FailuresRequest failures_import(Json records) {
  FailuresRequest r;
  r.action = "import";
  r.records = std::move(records);
  return r;
}

GPUEMU_WIRE_DEFINE_REQUEST(FailuresRequest)
GPUEMU_WIRE_DEFINE_REPLY(FailuresReply)
GPUEMU_WIRE_DEFINE_REQUEST(PushRequest)
GPUEMU_WIRE_DEFINE_REPLY(PushReply)
GPUEMU_WIRE_DEFINE_REQUEST(ReproduceRequest)
GPUEMU_WIRE_DEFINE_REPLY(ReproduceReply)
GPUEMU_WIRE_DEFINE_REQUEST(MinimizeRequest)
GPUEMU_WIRE_DEFINE_REPLY(MinimizeReply)
GPUEMU_WIRE_DEFINE_REQUEST(DiagnoseRequest)
GPUEMU_WIRE_DEFINE_REPLY(DiagnoseReply)

}  // namespace gpuemu::wire
