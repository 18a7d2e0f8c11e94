// The fields of the scale family's messages (gpuemu/protocol/wire/scale.hpp).
#include "gpuemu/protocol/wire/scale.hpp"

namespace gpuemu::wire {

template <class M, class S>
void CalibrationsRequest::map(M& m, S& s) {
  m.opt("action", s.action);
  m.opt("op", s.op);
  m.opt("calibrations", s.calibrations);
  m.opt("replace", s.replace);
  m.opt("source", s.source);
}

std::vector<std::string_view> CalibrationsRequest::unread_fields(const Json& params) {
  const std::string action = action_of(params, "list");
  if (action == "list" || action == "export") return {"calibrations", "replace", "source"};
  if (action == "import") return {"op"};
  return {"op", "calibrations", "replace", "source"};
}

template <class M, class S>
void CalibrationsReply::map(M& m, S& s) {
  m.opt("calibrations", s.calibrations);
  m.opt("count", s.count);
  m.opt("imported", s.imported);
  m.opt("unchanged", s.unchanged);
  m.opt("kept_newer", s.kept_newer);
}

template <class M, class S>
void OutboxRequest::map(M& m, S& s) {
  m.opt("action", s.action);
  m.opt("limit", s.limit);
  m.opt("op", s.op);
  m.opt("since_ms", s.since_ms);
  m.opt("runs", s.runs);
  m.opt("timeout_s", s.timeout_s);
}

std::vector<std::string_view> OutboxRequest::unread_fields(const Json& params) {
  const std::string action = action_of(params, "status");
  if (action == "rejected") return {"op", "since_ms", "runs", "timeout_s"};
  if (action == "backlog") return {"limit", "timeout_s"};
  if (action == "wait") return {"limit", "op", "since_ms", "runs"};
  return {"limit", "op", "since_ms", "runs", "timeout_s"};  // status, retry, or unknown
}

template <class M, class S>
void OutboxReply::map(M& m, S& s) {
  m.rest(s.status_fields);
  m.opt("rejected", s.rejected);
  m.opt("queued", s.queued);
  m.opt("requeued", s.requeued);
  m.opt("drained", s.drained);
  m.opt("status", s.status);
}

CalibrationsRequest calibrations_request(std::string action, std::string op) {
  CalibrationsRequest r;
  r.action = std::move(action);
  r.op = std::move(op);
  return r;
}

OutboxRequest outbox_request(std::string action) {
  OutboxRequest r;
  r.action = std::move(action);
  return r;
}

GPUEMU_WIRE_DEFINE_REQUEST(CalibrationsRequest)
GPUEMU_WIRE_DEFINE_REPLY(CalibrationsReply)
GPUEMU_WIRE_DEFINE_REQUEST(OutboxRequest)
GPUEMU_WIRE_DEFINE_REPLY(OutboxReply)

}  // namespace gpuemu::wire
