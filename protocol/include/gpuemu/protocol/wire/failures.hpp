// The failures family of the wire (docs/protocol.md, "Requests"): failures (list, get, delete,
// export, import), push, reproduce, minimize, diagnose. Fields are listed once, in failures.cpp.
#pragma once

#include "gpuemu/protocol/wire/fields.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::wire {

struct FailuresRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "failures";
  std::string action = "list";  // list | get | delete | export | import
  std::string id;               // get, delete
  std::string op;               // list, export: only this op's
  std::int64_t since_ms = 0;
  std::size_t limit = 0;   // 0: all
  std::size_t offset = 0;  // export: skip that many of the matching failures
  bool snapshot = false;   // get: the snapshot's bytes in base64 too
  Json records;            // import: export's records
  template <class M, class S>
  static void map(M& m, S& s);
  // The fields the request's action does not read (FieldReader::set_unread).
  static std::vector<std::string_view> unread_fields(const Json& params);
};
// The failures requests clients make.
FailuresRequest failures_list(std::string op = "", std::size_t limit = 0);
FailuresRequest failures_get(std::string id);
FailuresRequest failures_delete(std::string id);
FailuresRequest failures_export(std::string op, std::size_t offset);
FailuresRequest failures_import(Json records);

// One reply struct for every action; the fields of the others are absent.
struct FailuresReply {
  using Fields = void;
  Json record;                       // get: the record's meta, `case`, `snapshot_bytes`, ...
  Json failures, records;            // list / export
  std::optional<std::size_t> count;  // list / export
  std::optional<bool> truncated;     // a page that stopped at 12 MiB of JSON
  std::optional<std::size_t> matching, next_offset;
  Json imported, present;  // import
  std::optional<std::string> deleted;
  template <class M, class S>
  static void map(M& m, S& s);
};

// A worker daemon's push (docs/scale.md); snapshots travel as tensors snapshots/<i>.
struct PushRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "push";
  Json records = Json::array();  // exported failures, `snapshot_tensor` naming their tensor
  Json runs = Json::array();     // run summaries with id and started_ms
  Json origin = Json::object();  // {host, home, pid, gpuemu_version}
  template <class M, class S>
  static void map(M& m, S& s);
};
struct PushReply {
  using Fields = void;
  Json failures;  // {imported, present}
  Json runs;      // {imported, present}
  template <class M, class S>
  static void map(M& m, S& s);
};

struct ReproduceRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "reproduce";
  std::string id;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct ReproduceReply {
  using Fields = void;
  std::string id, op;
  std::uint64_t seed = 0;
  std::size_t snapshot_bytes = 0;
  Json regenerated_identical;  // bool
  Json regeneration;           // {identical, bytes | error}
  Json kernel;
  Json case_json;              // "case"
  std::optional<Json> passed;  // null: a client-side kernel (replay it in the client)
  Json verdict;
  std::string message;
  std::optional<Json> max_error;
  std::optional<bool> still_fails;
  Json envelope_source;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct MinimizeRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "minimize";
  std::string id;
  int max_evaluations = 200;
  template <class M, class S>
  static void map(M& m, S& s);
};
// Minimized::to_json with the failure's id and, when the minimized case still fails and was
// stored, its id and repro command.
struct MinimizeReply {
  using Fields = void;
  Json minimized;
  std::string id;
  std::optional<std::string> minimized_id, repro;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct DiagnoseRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "diagnose";
  std::string id;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct DiagnoseReply {
  using Fields = void;
  std::string id;
  Json diagnosis = Json::object();  // {bug_class, summary, evidence}
  bool rerun = false;               // false: a client-side kernel, the stored diagnosis
  std::optional<bool> passed;
  template <class M, class S>
  static void map(M& m, S& s);
};

GPUEMU_WIRE_DECLARE(FailuresRequest);
GPUEMU_WIRE_DECLARE(FailuresReply);
GPUEMU_WIRE_DECLARE(PushRequest);
GPUEMU_WIRE_DECLARE(PushReply);
GPUEMU_WIRE_DECLARE(ReproduceRequest);
GPUEMU_WIRE_DECLARE(ReproduceReply);
GPUEMU_WIRE_DECLARE(MinimizeRequest);
GPUEMU_WIRE_DECLARE(MinimizeReply);
GPUEMU_WIRE_DECLARE(DiagnoseRequest);
GPUEMU_WIRE_DECLARE(DiagnoseReply);

}  // namespace gpuemu::wire
