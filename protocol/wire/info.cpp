// The fields of the info family's messages (gpuemu/protocol/wire/info.hpp), in wire order.
#include "gpuemu/protocol/wire/info.hpp"

namespace gpuemu::wire {

template <class M, class S>
void Identity::map(M& m, S& s) {
  m.opt("pid", s.pid);
  m.opt("version", s.version);
  m.opt("protocol", s.protocol);
  m.opt("socket", s.socket);
  m.opt("home", s.home);
  m.opt("started_ms", s.started_ms);
  m.opt("uptime_s", s.uptime_s);
  m.opt("stopping", s.stopping);
}

template <class M, class S>
void HelloRequest::map(M& m, S& s) {
  m.opt("client", s.client);
  m.opt("protocol", s.protocol);
}

template <class M, class S>
void HelloReply::map(M& m, S& s) {
  Identity::map(m, s.identity);
  m.opt("capabilities", s.capabilities);
  m.opt("methods", s.methods);
}

template <class M, class S>
void PingRequest::map(M& m, S& s) {
  m.opt("echo", s.echo);
}

template <class M, class S>
void PingReply::map(M& m, S& s) {
  m.opt("pong", s.pong);
  m.opt("uptime_s", s.uptime_s);
  m.opt("stopping", s.stopping);
  m.opt("changes", s.changes);
  m.opt("started_ms", s.started_ms);
}

template <class M, class S>
void StoreSummary::map(M& m, S& s) {
  m.opt("dir", s.dir);
  m.opt("version", s.version);
  m.opt("failures", s.failures);
  m.opt("calibrations", s.calibrations);
  m.opt("baselines", s.baselines);
  m.opt("runs", s.runs);
  m.opt("map_bytes", s.map_bytes);
  m.opt("used_bytes", s.used_bytes);
}

template <class M, class S>
void CaseCacheSummary::map(M& m, S& s) {
  m.opt("limit_bytes", s.limit_bytes);
  m.opt("bytes", s.bytes);
  m.opt("cases", s.cases);
  m.opt("hits", s.hits);
  m.opt("misses", s.misses);
}

template <class M, class S>
void ShmSummary::map(M& m, S& s) {
  m.opt("borrowed_tensors", s.borrowed_tensors);
  m.opt("borrowed_bytes", s.borrowed_bytes);
  m.opt("copied_tensors", s.copied_tensors);
  m.opt("copied_bytes", s.copied_bytes);
  m.opt("owned_tensors", s.owned_tensors);
  m.opt("owned_bytes", s.owned_bytes);
}

template <class M, class S>
void StatsReply::map(M& m, S& s) {
  Identity::map(m, s.identity);
  m.opt("requests", s.requests);
  m.opt("in_flight", s.in_flight);
  m.opt("errors", s.errors);
  m.opt("store", s.store);
  m.opt("case_cache", s.case_cache);
  m.opt("shm", s.shm);
  m.opt("oracle", s.oracle);
}

template <class M, class S>
void ShutdownReply::map(M& m, S& s) {
  m.opt("stopping", s.stopping);
  m.opt("pid", s.pid);
}

template <class M, class S>
void OpSummary::map(M& m, S& s) {
  m.opt("name", s.name);
  m.opt("family", s.family);
  m.opt("summary", s.summary);
  m.opt("version", s.version);
  m.opt("dtypes", s.dtypes);
  m.opt("kernels", s.kernels);
}

template <class M, class S>
void ListOpsReply::map(M& m, S& s) {
  m.opt("ops", s.ops);
}

template <class M, class S>
void DescribeOpRequest::map(M& m, S& s) {
  m.required("op", s.op);
}

template <class M, class S>
void DescribeOpReply::map(M& m, S& s) {
  m.rest(s.schema);
  m.opt("source", s.source);
  m.opt("kernels", s.kernels);
  m.opt("envelopes", s.envelopes);
}

template <class M, class S>
void ProgressRequest::map(M& m, S& s) {
  m.required("token", s.token);
}

template <class M, class S>
void ProgressReply::map(M& m, S& s) {
  m.opt("token", s.token);
  m.opt("running", s.running);
  m.opt("done", s.done);
  m.opt("total", s.total);
}

GPUEMU_WIRE_DEFINE_REQUEST(HelloRequest)
GPUEMU_WIRE_DEFINE_REPLY(HelloReply)
GPUEMU_WIRE_DEFINE_REQUEST(PingRequest)
GPUEMU_WIRE_DEFINE_REPLY(PingReply)
GPUEMU_WIRE_DEFINE_REQUEST(StatsRequest)
GPUEMU_WIRE_DEFINE_REPLY(StatsReply)
GPUEMU_WIRE_DEFINE_REQUEST(ShutdownRequest)
GPUEMU_WIRE_DEFINE_REPLY(ShutdownReply)
GPUEMU_WIRE_DEFINE_REQUEST(ListOpsRequest)
GPUEMU_WIRE_DEFINE_REPLY(ListOpsReply)
GPUEMU_WIRE_DEFINE_REQUEST(DescribeOpRequest)
GPUEMU_WIRE_DEFINE_REPLY(DescribeOpReply)
GPUEMU_WIRE_DEFINE_REQUEST(ProgressRequest)
GPUEMU_WIRE_DEFINE_REPLY(ProgressReply)

}  // namespace gpuemu::wire
