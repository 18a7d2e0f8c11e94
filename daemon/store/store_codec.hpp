// How the failure store lays out its keys and values (docs/store.md says the same in prose).
// Internal to gpuemu_store.
//
// failures  key   the id ("f" + 16 lowercase hex digits, or the caller's own)
//           value u32 little-endian H | H bytes of JSON header | one zstd frame of the input bytes
//                 header = {"op": str, "created_ms": int, "input_bytes": int, "meta": {...}}
//                 (input_bytes is the uncompressed size, so `list` never touches the frame)
// failures_idx  key  op | 0x00 | created_ms as u64 big-endian | 0x00 | id     value  id
//                    (memcmp order = op, then time, then id; "sum\0" sorts before "sum_sq\0")
// calibrations  key  op "/" dtype                                            value  JSON text
// baselines     key  name                                                    value  JSON text
// runs          key  started_ms as u64 big-endian | id                       value  JSON text
// outbox        key  queued_ms as u64 big-endian | kind ('f' or 'r') | id     value  JSON text
//                    {} for a failure, {"started_ms": N} for a run; "rejected"/"rejected_ms"
//                    once the receiver refused it for good
// meta          key  "version", "created_ms"                                 value  decimal text
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/store/store.hpp"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace gpuemu::store_codec {

// LMDB's default maximum key size is 511 bytes; these caps keep every composite key under it.
inline constexpr std::size_t k_max_name_bytes = 200;

// A name usable inside a key: non-empty, at most k_max_name_bytes, no NUL byte.
Status check_name(std::string_view what, std::string_view name);

void append_be64(std::string& out, std::uint64_t value);
std::uint64_t read_be64(std::string_view bytes);  // the first 8 bytes

std::string failure_index_key(std::string_view op, std::int64_t created_ms, std::string_view id);
// The key prefix shared by every index entry of `op`: op | 0x00.
std::string failure_index_prefix(std::string_view op);

struct FailureIndexKey {
  std::string_view op;
  std::int64_t created_ms = 0;
  std::string_view id;
};
std::optional<FailureIndexKey> parse_failure_index_key(std::string_view key);

std::string run_key(std::int64_t started_ms, std::string_view id);
std::string outbox_key(std::int64_t queued_ms, char kind, std::string_view id);
struct OutboxKey {
  std::int64_t queued_ms = 0;
  char kind = 0;
  std::string_view id;
};
std::optional<OutboxKey> parse_outbox_key(std::string_view key);

// The id of a record stored without one: "f" + 16 hex digits of a 64-bit hash of its op, meta and
// input bytes; `attempt` > 0 draws another (a different record already holds the first).
std::string content_failure_id(const FailureRecord& record, int attempt);
std::string calibration_key(std::string_view op, std::string_view dtype);

// The failures value for `record` (id excluded: it is the key). Compresses the inputs.
Result<std::string> encode_failure(const FailureRecord& record);
// Decodes a failures value; the summary never decompresses the inputs.
Result<FailureSummary> decode_failure_summary(const std::string& id, std::string_view value);
Result<FailureRecord> decode_failure(const std::string& id, std::string_view value);

// JSON text for a value; invalid UTF-8 in strings is replaced rather than thrown about.
std::string dump_json(const Json& value);
// Parses stored JSON text; damaged text is an io_error naming `what`.
Result<Json> parse_stored_json(std::string_view text, const std::string& what);

// Random ids: `prefix` + 16 lowercase hex digits of a 64-bit value from a generator seeded by
// std::random_device, the clock and the process id, with each draw mixed with the current time.
// Not thread-safe: the Store draws only while holding its write mutex.
class IdGenerator {
 public:
  IdGenerator();
  std::string next(char prefix);

 private:
  std::mt19937_64 m_rng;
};

std::int64_t now_ms();

}  // namespace gpuemu::store_codec
