// The info family of the wire (docs/protocol.md, "Requests"): hello, ping, stats, shutdown,
// list_ops, describe_op, progress. One request and one reply struct per method; their fields are
// listed once, in info.cpp (`map`), which gives the JSON both ways and the field names.
#pragma once

#include "gpuemu/protocol/wire/fields.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::wire {

// What hello and stats say about the daemon.
struct Identity {
  using Fields = void;
  std::int64_t pid = 0;
  std::string version;
  int protocol = 0;
  std::string socket, home;
  std::int64_t started_ms = 0;
  double uptime_s = 0;
  bool stopping = false;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct HelloRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "hello";
  // Informative, never read by the daemon (so of any type, as before the typed layer): who asks
  // ("gpuemu-cpp", "gpuemu-lsp") and its k_protocol_version.
  Json client, protocol;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct HelloReply {
  using Fields = void;
  Identity identity;
  std::vector<std::string> capabilities, methods;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct PingRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "ping";
  // The reply carries back the tensors of the request, as they arrived (a transport check and
  // benchmark: bench/handoff.py, the shared-memory tests).
  bool echo = false;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct PingReply {
  using Fields = void;
  bool pong = true;
  double uptime_s = 0;
  bool stopping = false;
  std::optional<std::uint64_t> changes;  // absent: the daemon has no store
  std::int64_t started_ms = 0;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct StatsRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "stats";
  template <class M, class S>
  static void map(M&, S&) {}
};
struct StoreSummary {
  using Fields = void;
  std::string dir;
  int version = 0;
  std::size_t failures = 0, calibrations = 0, baselines = 0, runs = 0, map_bytes = 0,
              used_bytes = 0;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct CaseCacheSummary {
  using Fields = void;
  std::size_t limit_bytes = 0, bytes = 0, cases = 0;
  std::int64_t hits = 0, misses = 0;
  template <class M, class S>
  static void map(M& m, S& s);
};
// Request tensors that arrived in a local client's shared memory (docs/protocol.md, "Shared
// memory"): read where they lay (borrowed), copied out while decoding (integer and bool
// storages), and copied later because a handler kept a borrowed one past its request (owned).
struct ShmSummary {
  using Fields = void;
  std::int64_t borrowed_tensors = 0, borrowed_bytes = 0, copied_tensors = 0, copied_bytes = 0,
               owned_tensors = 0, owned_bytes = 0;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct StatsReply {
  using Fields = void;
  Identity identity;
  std::int64_t requests = 0, in_flight = 0, errors = 0;
  std::optional<StoreSummary> store;
  std::optional<CaseCacheSummary> case_cache;
  std::optional<ShmSummary> shm;
  std::optional<std::string> oracle;  // where the fp64 oracle runs: "cpu (OpenBLAS)", "cuda: <device>"
  template <class M, class S>
  static void map(M& m, S& s);
};

struct ShutdownRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "shutdown";
  template <class M, class S>
  static void map(M&, S&) {}
};
struct ShutdownReply {
  using Fields = void;
  bool stopping = true;
  std::int64_t pid = 0;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct ListOpsRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "list_ops";
  template <class M, class S>
  static void map(M&, S&) {}
};
struct OpSummary {
  using Fields = void;
  std::string name, family, summary;
  int version = 1;
  std::vector<std::string> dtypes, kernels;
  template <class M, class S>
  static void map(M& m, S& s);
};
struct ListOpsReply {
  using Fields = void;
  std::vector<OpSummary> ops;
  template <class M, class S>
  static void map(M& m, S& s);
};

struct DescribeOpRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "describe_op";
  std::string op;
  template <class M, class S>
  static void map(M& m, S& s);
};
// The op's schema document (schemas/ops/*.json, as parsed) with these fields added.
struct DescribeOpReply {
  using Fields = void;
  Json schema;
  std::string source;                // the schema's file
  std::vector<std::string> kernels;  // built-in kernels
  Json envelopes = Json::object();   // {dtype: envelope}
  template <class M, class S>
  static void map(M& m, S& s);
};

struct ProgressRequest {
  using Fields = void;
  static constexpr std::string_view k_method = "progress";
  std::string token;  // the progress_token of a running fuzz or calibrate
  template <class M, class S>
  static void map(M& m, S& s);
};
struct ProgressReply {
  using Fields = void;
  std::string token;
  bool running = false;
  std::optional<std::int64_t> done, total;  // while it runs
  template <class M, class S>
  static void map(M& m, S& s);
};

GPUEMU_WIRE_DECLARE(HelloRequest);
GPUEMU_WIRE_DECLARE(HelloReply);
GPUEMU_WIRE_DECLARE(PingRequest);
GPUEMU_WIRE_DECLARE(PingReply);
GPUEMU_WIRE_DECLARE(StatsRequest);
GPUEMU_WIRE_DECLARE(StatsReply);
GPUEMU_WIRE_DECLARE(ShutdownRequest);
GPUEMU_WIRE_DECLARE(ShutdownReply);
GPUEMU_WIRE_DECLARE(ListOpsRequest);
GPUEMU_WIRE_DECLARE(ListOpsReply);
GPUEMU_WIRE_DECLARE(DescribeOpRequest);
GPUEMU_WIRE_DECLARE(DescribeOpReply);
GPUEMU_WIRE_DECLARE(ProgressRequest);
GPUEMU_WIRE_DECLARE(ProgressReply);

}  // namespace gpuemu::wire
