// The scale family of the wire (docs/protocol.md, "Requests"; docs/scale.md): calibrations (list,
// export, import) and outbox (status, backlog, retry, rejected, wait). Fields: scale.cpp.
#pragma once

#include "gpuemu/protocol/wire/fields.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace gpuemu::wire {

struct CalibrationsRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "calibrations";
  std::string action = "list";    // list | export | import
  std::string op;                 // list, export: only this op's
  Json calibrations;              // import: [{op, dtype, envelope, ...provenance}]
  std::string replace = "newer";  // import: newer | always
  std::string source;             // import: kept as imported_from
  template <class M, class S>
  static void map(M& m, S& s);
  // The fields the request's action does not read (FieldReader::set_unread).
  static std::vector<std::string_view> unread_fields(const Json& params);
};
CalibrationsRequest calibrations_request(std::string action, std::string op = "");

struct CalibrationsReply {
  using Fields = void;
  Json calibrations;                     // list, export
  std::optional<std::size_t> count;      // list, export
  Json imported, unchanged, kept_newer;  // import: "op/dtype" names
  template <class M, class S>
  static void map(M& m, S& s);
};

struct OutboxRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "outbox";
  std::string action = "status";  // status | backlog | retry | rejected | wait
  std::size_t limit = 0;          // rejected: at most that many (0: all)
  std::string op;                 // backlog: only this op's
  std::int64_t since_ms = 0;      // backlog
  bool runs = true;               // backlog: the runs too
  double timeout_s = 60.0;        // wait
  template <class M, class S>
  static void map(M& m, S& s);
  // The fields the request's action does not read (FieldReader::set_unread).
  static std::vector<std::string_view> unread_fields(const Json& params);
};
OutboxRequest outbox_request(std::string action);

struct OutboxReply {
  using Fields = void;
  Json status_fields;  // status: the pusher's status (to, pending, rejected, ...)
  Json rejected;       // rejected: [{kind, id, queued_ms, why}]
  std::optional<std::size_t> queued, requeued;
  std::optional<bool> drained;
  Json status;  // backlog, retry, wait: the status after it
  template <class M, class S>
  static void map(M& m, S& s);
};

GPUEMU_WIRE_DECLARE(CalibrationsRequest);
GPUEMU_WIRE_DECLARE(CalibrationsReply);
GPUEMU_WIRE_DECLARE(OutboxRequest);
GPUEMU_WIRE_DECLARE(OutboxReply);

}  // namespace gpuemu::wire
