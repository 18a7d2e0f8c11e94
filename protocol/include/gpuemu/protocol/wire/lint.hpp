// The lint family of the wire (docs/protocol.md, "Requests"; docs/lint.md): lint and baselines.
// Fields are listed once, in lint.cpp.
#pragma once

#include "gpuemu/protocol/wire/fields.hpp"

#include <optional>
#include <string>
#include <vector>

namespace gpuemu::wire {

struct LintRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "lint";
  Json paths;        // files or directories: a non-empty array of strings
  Json policy_toml;  // a [lint] policy's TOML text (a string; anything else is ignored)
  std::string policy_source = "policy";                // where that text came from, for its errors
  std::optional<std::vector<std::string>> arches;      // absent: the policy's
  std::optional<std::vector<std::string>> nvcc_flags;  // absent: the policy's
  std::string baseline;                                // compare against this stored baseline
  std::string update_baseline;                         // store this run as that baseline
  template <class M, class S>
  static void map(M& m, S& s);
  // policy_source without a policy_toml (FieldReader::set_unread).
  static std::vector<std::string_view> unread_fields(const Json& params);
};
// The lint report (lint::report_to_json) with the verdict.
struct LintReply {
  using Fields = void;
  Json report;
  bool failed = false;
  std::optional<std::string> baseline_written;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct BaselinesRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "baselines";
  std::string action = "list";  // list | get | put | delete
  std::string name;             // get, put, delete
  Json baseline;                // put
  template <class M, class S>
  static void map(M& m, S& s);
  // The fields the request's action does not read (FieldReader::set_unread).
  static std::vector<std::string_view> unread_fields(const Json& params);
};
struct BaselinesReply {
  using Fields = void;
  std::optional<std::vector<std::string>> baselines;  // list
  std::optional<std::string> name;                    // get, put
  Json baseline;                                      // get
  std::optional<bool> stored;                         // put
  std::optional<std::string> deleted;                 // delete
  template <class M, class S>
  static void map(M& m, S& s);
};

GPUEMU_WIRE_DECLARE(LintRequest);
GPUEMU_WIRE_DECLARE(LintReply);
GPUEMU_WIRE_DECLARE(BaselinesRequest);
GPUEMU_WIRE_DECLARE(BaselinesReply);

}  // namespace gpuemu::wire
