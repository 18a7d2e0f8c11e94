// The fields of the lint family's messages (gpuemu/protocol/wire/lint.hpp).
#include "gpuemu/protocol/wire/lint.hpp"

namespace gpuemu::wire {

template <class M, class S>
void LintRequest::map(M& m, S& s) {
  m.opt("paths", s.paths);
  m.opt("policy_toml", s.policy_toml);
  m.opt("policy_source", s.policy_source);
  m.opt("arches", s.arches);
  m.opt("nvcc_flags", s.nvcc_flags);
  m.opt("baseline", s.baseline);
  m.opt("update_baseline", s.update_baseline);
}

std::vector<std::string_view> LintRequest::unread_fields(const Json& params) {
  const bool policy =
      params.is_object() && params.contains("policy_toml") && params["policy_toml"].is_string();
  if (!policy) return {"policy_source"};
  return {};
}

template <class M, class S>
void LintReply::map(M& m, S& s) {
  m.rest(s.report);
  m.opt("failed", s.failed);
  m.opt("baseline_written", s.baseline_written);
}

template <class M, class S>
void BaselinesRequest::map(M& m, S& s) {
  m.opt("action", s.action);
  m.opt("name", s.name, "the request needs a string 'name'");
  m.opt("baseline", s.baseline);
}

std::vector<std::string_view> BaselinesRequest::unread_fields(const Json& params) {
  const std::string action = action_of(params, "list");
  if (action == "list") return {"name", "baseline"};
  return {};
}

template <class M, class S>
void BaselinesReply::map(M& m, S& s) {
  m.opt("baselines", s.baselines);
  m.opt("name", s.name);
  m.opt("baseline", s.baseline);
  m.opt("stored", s.stored);
  m.opt("deleted", s.deleted);
}

GPUEMU_WIRE_DEFINE_REQUEST(LintRequest)
GPUEMU_WIRE_DEFINE_REPLY(LintReply)
GPUEMU_WIRE_DEFINE_REQUEST(BaselinesRequest)
GPUEMU_WIRE_DEFINE_REPLY(BaselinesReply)

}  // namespace gpuemu::wire
