// Frame encoding and decoding (docs/protocol.md, "Framing").
#include "gpuemu/protocol.hpp"

#include <cstring>
#include <functional>

namespace gpuemu::protocol {
namespace {

std::size_t align_up(std::size_t n) {
  return (n + k_alignment - 1) / k_alignment * k_alignment;
}

std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

Error frame_error(std::string message) {
  return make_error(ErrorCode::protocol_error, std::move(message));
}

// Reads an array of non-negative-or-any int64 from a descriptor field.
Result<std::vector<std::int64_t>> int_array(const Json& d, const char* field,
                                            const std::string& key) {
  auto it = d.find(field);
  if (it == d.end() || !it->is_array())
    return frame_error("tensor '" + key + "': '" + field + "' must be an array of integers");
  std::vector<std::int64_t> v;
  for (const auto& x : *it) {
    if (!x.is_number_integer())
      return frame_error("tensor '" + key + "': '" + field + "' must be an array of integers");
    v.push_back(x.get<std::int64_t>());
  }
  return v;
}

Result<std::int64_t> int_field(const Json& d, const char* field, const std::string& key) {
  auto it = d.find(field);
  if (it == d.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
    return frame_error("tensor '" + key + "': '" + field + "' must be a non-negative integer");
  return it->get<std::int64_t>();
}

}  // namespace

std::vector<std::string> capabilities() {
  return {"frames.v1",  "tensors.inline", "fuzz.builtin", "fuzz.script",
          "test_batch", "submit_outputs", "validate",     "calibrate",
          "minimize",   "reproduce",      "diagnose",     "failures",
          "lint",       "baselines",      "stats",        "shutdown"};
}

Result<Tensor> Frame::tensor(std::string_view key) const {
  auto it = tensors.find(key);
  if (it == tensors.end()) return frame_error("the message carries no tensor '" + std::string(key) + "'");
  return it->second;
}

std::size_t encode_to(const Frame& frame, const std::function<std::byte*(std::size_t)>& alloc) {
  Json header = frame.header;
  Json descs = Json::array();
  std::size_t payload = 0;
  for (const auto& [key, t] : frame.tensors) {
    const std::size_t nbytes = t.storage_bytes();
    descs.push_back({{"key", key},
                     {"dtype", std::string(dtype_name(t.dtype()))},
                     {"shape", t.shape()},
                     {"strides", t.strides()},
                     {"offset", t.offset()},
                     {"storage_nbytes", nbytes},
                     {"data_offset", payload}});
    payload = align_up(payload + nbytes);
  }
  header["tensors"] = std::move(descs);
  const std::string text = header.dump(-1, ' ', false, Json::error_handler_t::replace);
  const std::size_t head = align_up(8 + text.size());
  const std::size_t total = head + payload;
  std::byte* out = alloc(total);
  if (out == nullptr) return 0;  // the caller could not allocate: nothing written
  std::memcpy(out, k_magic, 4);
  const auto len = static_cast<std::uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<std::byte>((len >> (8 * i)) & 0xffu);
  std::memcpy(out + 8, text.data(), text.size());
  std::memset(out + 8 + text.size(), 0, head - 8 - text.size());
  std::size_t at = head;
  for (const auto& [key, t] : frame.tensors) {  // each storage once, then its padding
    const std::size_t nbytes = t.storage_bytes();
    if (nbytes) std::memcpy(out + at, t.storage()->data(), nbytes);
    std::memset(out + at + nbytes, 0, align_up(nbytes) - nbytes);
    at += align_up(nbytes);
  }
  return total;
}

std::vector<std::byte> encode(const Frame& frame) {
  std::vector<std::byte> out;
  encode_to(frame, [&out](std::size_t n) {
    out.resize(n);
    return out.data();
  });
  return out;
}

Result<Json> decode_header(std::span<const std::byte> bytes) {
  if (bytes.size() < 8)
    return frame_error("frame of " + std::to_string(bytes.size()) +
               " bytes is shorter than its 8-byte prefix");
  if (std::memcmp(bytes.data(), k_magic, 4) != 0)
    return frame_error("frame does not start with the magic \"GEMU\"");
  const std::size_t hlen = get_u32(bytes.data() + 4);
  if (hlen > k_max_header_bytes)
    return frame_error("header of " + std::to_string(hlen) + " bytes exceeds the 16 MiB limit");
  if (8 + hlen > bytes.size())
    return frame_error("header length " + std::to_string(hlen) + " runs past the end of the frame");
  Json header = Json::parse(reinterpret_cast<const char*>(bytes.data()) + 8,
                            reinterpret_cast<const char*>(bytes.data()) + 8 + hlen, nullptr, false);
  if (header.is_discarded()) return frame_error("header is not valid JSON");
  if (!header.is_object()) return frame_error("header must be a JSON object");
  return header;
}

Result<Frame> decode(std::span<const std::byte> bytes) {
  Frame frame;
  GPUEMU_TRY(frame.header, decode_header(bytes));
  const std::size_t hlen = get_u32(bytes.data() + 4);
  const std::size_t head = align_up(8 + hlen);
  const std::size_t payload = bytes.size() > head ? bytes.size() - head : 0;
  auto descs = frame.header.find("tensors");
  if (descs == frame.header.end()) return frame;
  if (!descs->is_array()) return frame_error("'tensors' must be an array");
  for (const auto& d : *descs) {
    if (!d.is_object() || !d.contains("key") || !d["key"].is_string())
      return frame_error("a tensor descriptor has no string 'key'");
    const std::string key = d["key"].get<std::string>();
    if (!d.contains("dtype") || !d["dtype"].is_string())
      return frame_error("tensor '" + key + "': 'dtype' must be a string");
    auto dt = parse_dtype(d["dtype"].get<std::string>());
    if (!dt)
      return frame_error("tensor '" + key + "': unknown dtype '" + d["dtype"].get<std::string>() + "'");
    GPUEMU_TRY(auto shape, int_array(d, "shape", key));
    GPUEMU_TRY(auto strides, int_array(d, "strides", key));
    GPUEMU_TRY(auto offset, int_field(d, "offset", key));
    GPUEMU_TRY(auto nbytes, int_field(d, "storage_nbytes", key));
    if (!d.contains("data_offset"))
      return frame_error("tensor '" + key +
                 "' has no 'data_offset' (this daemon carries tensor bytes inline only)");
    GPUEMU_TRY(auto at, int_field(d, "data_offset", key));
    if (static_cast<std::size_t>(at) % k_alignment != 0)
      return frame_error("tensor '" + key + "': data_offset is not 64-byte aligned");
    if (static_cast<std::size_t>(at) > payload ||
        static_cast<std::size_t>(nbytes) > payload - static_cast<std::size_t>(at))
      return frame_error("tensor '" + key + "': bytes [" + std::to_string(at) + ", " +
                 std::to_string(at + nbytes) + ") run past the payload of " +
                 std::to_string(payload) + " bytes");
    if (shape.size() != strides.size())
      return frame_error("tensor '" + key + "': shape and strides differ in rank");
    for (auto s : shape)
      if (s < 0) return frame_error("tensor '" + key + "': negative size in shape");
    if (static_cast<std::size_t>(nbytes) % dtype_size(*dt) != 0)
      return frame_error("tensor '" + key + "': storage_nbytes is not a multiple of the element size");
    auto storage = std::make_shared<std::vector<std::byte>>(
        bytes.begin() + static_cast<std::ptrdiff_t>(head + at),
        bytes.begin() + static_cast<std::ptrdiff_t>(head + at + nbytes));
    auto t = Tensor::view(*dt, shape, strides, offset, std::move(storage));
    if (!t) return frame_error("tensor '" + key + "': " + t.error().message);
    if (!frame.tensors.emplace(key, std::move(t).value()).second)
      return frame_error("tensor key '" + key + "' appears twice");
  }
  frame.header.erase("tensors");
  return frame;
}

Frame make_request(std::string method, Json params) {
  Frame f;
  f.header = {
      {"v", k_protocol_version}, {"method", std::move(method)}, {"params", std::move(params)}};
  return f;
}

Frame make_reply(Json result) {
  Frame f;
  f.header = {{"v", k_protocol_version}, {"ok", true}, {"result", std::move(result)}};
  return f;
}

Frame make_error_reply(const Error& error) {
  Frame f;
  f.header = {
      {"v", k_protocol_version},
      {"ok", false},
      {"error", {{"code", std::string(error_code_name(error.code))}, {"message", error.message}}}};
  return f;
}

Result<Json> reply_result(const Frame& reply) {
  const Json& h = reply.header;
  if (!h.contains("ok") || !h["ok"].is_boolean()) return frame_error("reply has no boolean 'ok'");
  if (h["ok"].get<bool>()) return h.contains("result") ? h["result"] : Json::object();
  // Typed lookups: a reply whose error code or message is not a string (a broken or hostile
  // daemon) made value() throw type_error in the client (fuzz_frame).
  const Json e = h.value("error", Json::object());
  std::string code = "internal", message = "(no message)";
  if (e.is_object()) {
    if (auto c = e.find("code"); c != e.end() && c->is_string()) code = c->get<std::string>();
    if (auto m = e.find("message"); m != e.end() && m->is_string()) message = m->get<std::string>();
  }
  return make_error(parse_error_code(code).value_or(ErrorCode::internal), message);
}

}  // namespace gpuemu::protocol
