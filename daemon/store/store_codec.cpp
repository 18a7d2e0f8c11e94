#include "store_codec.hpp"

#include "compress.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>

namespace gpuemu::store_codec {

namespace {

Error corrupted(const std::string& what, const std::string& why) {
  return make_error(ErrorCode::io_error, "store corrupted: " + what + ": " + why);
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t clock_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::high_resolution_clock::now().time_since_epoch().count());
}

// The header part of a failures value, and where the zstd frame starts.
struct Header {
  Json json;
  std::string_view frame;
};

Result<Header> split_value(const std::string& id, std::string_view value) {
  const std::string what = "failure " + id;
  if (value.size() < 4) return corrupted(what, "value shorter than its length prefix");
  std::uint32_t length = 0;
  for (int i = 3; i >= 0; --i)
    length = (length << 8) | static_cast<unsigned char>(value[static_cast<std::size_t>(i)]);
  if (length > value.size() - 4) return corrupted(what, "header length beyond the value");
  Json json = Json::parse(value.substr(4, length), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return corrupted(what, "header is not JSON");
  const auto op = json.find("op");
  const auto created = json.find("created_ms");
  const auto size = json.find("input_bytes");
  if (op == json.end() || !op->is_string() || created == json.end() ||
      !created->is_number_integer() || size == json.end() || !size->is_number_unsigned())
    return corrupted(what, "header lacks op, created_ms or input_bytes");
  return Header{std::move(json), value.substr(4 + std::size_t{length})};
}

}  // namespace

Status check_name(std::string_view what, std::string_view name) {
  if (name.empty()) return make_error(ErrorCode::invalid_argument, std::string(what) + " is empty");
  if (name.size() > k_max_name_bytes)
    return make_error(ErrorCode::invalid_argument, std::string(what) + " longer than " +
                                                       std::to_string(k_max_name_bytes) + " bytes");
  if (name.find('\0') != std::string_view::npos)
    return make_error(ErrorCode::invalid_argument, std::string(what) + " contains a NUL byte");
  return {};
}

void append_be64(std::string& out, std::uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((value >> shift) & 0xff));
}

std::uint64_t read_be64(std::string_view bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

std::string failure_index_prefix(std::string_view op) {
  std::string key(op);
  key.push_back('\0');
  return key;
}

std::string failure_index_key(std::string_view op, std::int64_t created_ms, std::string_view id) {
  std::string key = failure_index_prefix(op);
  append_be64(key, static_cast<std::uint64_t>(created_ms));
  key.push_back('\0');
  key.append(id);
  return key;
}

std::optional<FailureIndexKey> parse_failure_index_key(std::string_view key) {
  const std::size_t nul = key.find('\0');
  if (nul == std::string_view::npos || key.size() < nul + 10 || key[nul + 9] != '\0')
    return std::nullopt;
  FailureIndexKey parsed;
  parsed.op = key.substr(0, nul);
  parsed.created_ms = static_cast<std::int64_t>(read_be64(key.substr(nul + 1, 8)));
  parsed.id = key.substr(nul + 10);
  return parsed;
}

std::string run_key(std::int64_t started_ms, std::string_view id) {
  std::string key;
  append_be64(key, static_cast<std::uint64_t>(started_ms));
  key.append(id);
  return key;
}

std::string outbox_key(std::int64_t queued_ms, char kind, std::string_view id) {
  std::string key;
  append_be64(key, static_cast<std::uint64_t>(queued_ms));
  key.push_back(kind);
  key.append(id);
  return key;
}

std::optional<OutboxKey> parse_outbox_key(std::string_view key) {
  if (key.size() < 10) return std::nullopt;
  OutboxKey k;
  k.queued_ms = static_cast<std::int64_t>(read_be64(key));
  k.kind = key[8];
  k.id = key.substr(9);
  if (k.kind != 'f' && k.kind != 'r') return std::nullopt;
  return k;
}

std::string content_failure_id(const FailureRecord& record, int attempt) {
  // FNV-1a over op \0 meta \0 inputs, then mixed (splitmix64) with the attempt.
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto add = [&h](const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  };
  const std::string meta = dump_json(record.meta);
  const char zero = 0;
  add(record.op.data(), record.op.size());
  add(&zero, 1);
  add(meta.data(), meta.size());
  add(&zero, 1);
  add(record.inputs.data(), record.inputs.size());
  const std::uint64_t value = splitmix64(h + static_cast<std::uint64_t>(attempt));
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string id(17, '0');
  id[0] = 'f';
  for (int i = 0; i < 16; ++i)
    id[16 - static_cast<std::size_t>(i)] = k_hex[(value >> (4 * i)) & 0xf];
  return id;
}

std::string calibration_key(std::string_view op, std::string_view dtype) {
  std::string key(op);
  key.push_back('/');
  key.append(dtype);
  return key;
}

Result<std::string> encode_failure(const FailureRecord& record) {
  const Json header = {{"op", record.op},
                       {"created_ms", record.created_ms},
                       {"input_bytes", record.inputs.size()},
                       {"meta", record.meta}};
  const std::string text = dump_json(header);
  if (text.size() > 0xffffffffULL)
    return make_error(ErrorCode::invalid_argument, "failure meta larger than 4 GiB");
  std::string value;
  value.reserve(4 + text.size() + record.inputs.size() / 2 + 64);
  const auto length = static_cast<std::uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) value.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  value.append(text);
  GPUEMU_TRY_STATUS(zstd_append_frame(value, record.inputs));
  return value;
}

Result<FailureSummary> decode_failure_summary(const std::string& id, std::string_view value) {
  GPUEMU_TRY(Header header, split_value(id, value));
  FailureSummary summary;
  summary.id = id;
  summary.op = header.json["op"].get<std::string>();
  summary.created_ms = header.json["created_ms"].get<std::int64_t>();
  summary.input_bytes = header.json["input_bytes"].get<std::size_t>();
  if (auto meta = header.json.find("meta"); meta != header.json.end())
    summary.meta = std::move(*meta);
  return summary;
}

Result<FailureRecord> decode_failure(const std::string& id, std::string_view value) {
  GPUEMU_TRY(Header header, split_value(id, value));
  FailureRecord record;
  record.id = id;
  record.op = header.json["op"].get<std::string>();
  record.created_ms = header.json["created_ms"].get<std::int64_t>();
  const auto size = header.json["input_bytes"].get<std::size_t>();
  if (auto meta = header.json.find("meta"); meta != header.json.end())
    record.meta = std::move(*meta);
  GPUEMU_TRY(record.inputs, zstd_read_frame(header.frame, size, "failure " + id));
  return record;
}

std::string dump_json(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<Json> parse_stored_json(std::string_view text, const std::string& what) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return corrupted(what, "value is not JSON");
  return json;
}

IdGenerator::IdGenerator() {
  std::random_device device;
  const std::uint64_t t = clock_ns();
  std::seed_seq seq{device(),
                    device(),
                    device(),
                    device(),
                    static_cast<unsigned>(t),
                    static_cast<unsigned>(t >> 32),
                    static_cast<unsigned>(::getpid())};
  m_rng.seed(seq);
}

std::string IdGenerator::next(char prefix) {
  const std::uint64_t value = m_rng() ^ splitmix64(clock_ns());
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string id(17, '0');
  id[0] = prefix;
  for (int i = 0; i < 16; ++i)
    id[16 - static_cast<std::size_t>(i)] = k_hex[(value >> (4 * i)) & 0xf];
  return id;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace gpuemu::store_codec
