// The coverage family of the wire (docs/protocol.md, "Requests"): runs (the run history) and
// coverage (what fuzzing exercised per op). Fields are listed once, in coverage.cpp.
#pragma once

#include "gpuemu/protocol/wire/fields.hpp"

#include <cstdint>
#include <string>

namespace gpuemu::wire {

struct RunsRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "runs";
  std::string op;         // only this op's
  std::size_t limit = 0;  // the newest that many (0: all)
  template <class M, class S>
  static void map(M& m, S& s);
};
struct RunsReply {
  using Fields = void;
  Json runs = Json::array();  // newest first
  template <class M, class S>
  static void map(M& m, S& s);
};

struct CoverageRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "coverage";
  std::string op;    // only this op (it must exist)
  bool all = false;  // ops no run exercised too
  template <class M, class S>
  static void map(M& m, S& s);
  // `all` when one op is asked for (FieldReader::set_unread).
  static std::vector<std::string_view> unread_fields(const Json& params);
};
struct CoverageReply {
  using Fields = void;
  Json ops = Json::array();  // [{op, cases, runs, exercised, total, percent, missing, ...}]
  template <class M, class S>
  static void map(M& m, S& s);
};

GPUEMU_WIRE_DECLARE(RunsRequest);
GPUEMU_WIRE_DECLARE(RunsReply);
GPUEMU_WIRE_DECLARE(CoverageRequest);
GPUEMU_WIRE_DECLARE(CoverageReply);

}  // namespace gpuemu::wire
