// The fields of the coverage family's messages (gpuemu/protocol/wire/coverage.hpp).
#include "gpuemu/protocol/wire/coverage.hpp"

namespace gpuemu::wire {

template <class M, class S>
void RunsRequest::map(M& m, S& s) {
  m.opt("op", s.op);
  m.opt("limit", s.limit);
}

template <class M, class S>
void RunsReply::map(M& m, S& s) {
  m.opt("runs", s.runs);
}

template <class M, class S>
void CoverageRequest::map(M& m, S& s) {
  m.opt("op", s.op);
  m.opt("all", s.all);
}

std::vector<std::string_view> CoverageRequest::unread_fields(const Json& params) {
  const bool one_op = params.is_object() && params.contains("op") && params["op"].is_string() &&
                      !params["op"].get<std::string>().empty();
  if (one_op) return {"all"};
  return {};
}

template <class M, class S>
void CoverageReply::map(M& m, S& s) {
  m.opt("ops", s.ops);
}

GPUEMU_WIRE_DEFINE_REQUEST(RunsRequest)
GPUEMU_WIRE_DEFINE_REPLY(RunsReply)
GPUEMU_WIRE_DEFINE_REQUEST(CoverageRequest)
GPUEMU_WIRE_DEFINE_REPLY(CoverageReply)

}  // namespace gpuemu::wire
