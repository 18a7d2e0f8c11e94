// Frame encoding and decoding (docs/protocol.md, "Framing").
#include "gpuemu/protocol/protocol.hpp"

#include <sys/mman.h>

#include <cstdint>
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

// A view's elements all lie inside a storage of `nbytes` (Tensor::view's rule, for the views that
// stay in an arena and never become a Tensor).
Status check_view(DType dtype, const Shape& shape, const std::vector<std::int64_t>& strides,
                  std::int64_t offset, std::size_t nbytes, const std::string& key) {
  std::int64_t lo = offset, hi = offset;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return {};
    const std::int64_t span = strides[i] * (shape[i] - 1);
    (span < 0 ? lo : hi) += span;
  }
  const auto elems = static_cast<std::int64_t>(nbytes / dtype_size(dtype));
  if (lo < 0 || hi >= elems)
    return frame_error("tensor '" + key + "': view of shape " + shape_to_string(shape) +
                       " reaches element " + std::to_string(hi) + " of a storage holding " +
                       std::to_string(elems));
  return {};
}

Result<shm::SegmentRef> segment_ref(const Json& d, const std::string& key) {
  const Json& s = d["shm"];
  if (!s.is_object()) return frame_error("tensor '" + key + "': 'shm' must be an object");
  shm::SegmentRef ref;
  for (const char* f : {"pid", "fd", "size", "offset"}) {
    auto it = s.find(f);
    if (it == s.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
      return frame_error("tensor '" + key + "': shm." + f + " must be a non-negative integer");
  }
  ref.pid = s["pid"].get<std::int64_t>();
  ref.fd = s["fd"].get<std::int64_t>();
  ref.size = s["size"].get<std::uint64_t>();
  ref.offset = s["offset"].get<std::uint64_t>();
  if (ref.offset % k_alignment != 0)
    return frame_error("tensor '" + key + "': shm.offset is not 64-byte aligned");
  return ref;
}

// A storage copied out of an arena (one the receiver does not borrow). Large ones are asked for
// huge pages before the copy touches them: a fresh 64 MiB block faulted 16,384 pages in one by one
// here (about 15 us each on this VM, 25x the copy), with huge pages 32.
std::shared_ptr<std::vector<std::byte>> copy_out(std::span<const std::byte> src) {
  auto v = std::make_shared<std::vector<std::byte>>();
  v->reserve(src.size());
  constexpr std::uintptr_t k_huge = std::uintptr_t{2} << 20;
  if (src.size() >= 2 * k_huge) {
    const auto p = reinterpret_cast<std::uintptr_t>(v->data());
    const std::uintptr_t lo = (p + k_huge - 1) & ~(k_huge - 1);
    const std::uintptr_t hi = (p + src.size()) & ~(k_huge - 1);
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  }
  v->insert(v->end(), src.begin(), src.end());
  return v;
}

Json descriptor(const std::string& key, DType dtype, const Shape& shape,
                const std::vector<std::int64_t>& strides, std::int64_t offset, std::size_t nbytes) {
  return {{"key", key},
          {"dtype", std::string(dtype_name(dtype))},
          {"shape", shape},
          {"strides", strides},
          {"offset", offset},
          {"storage_nbytes", nbytes}};
}

Json shm_json(const shm::SegmentRef& r) {
  return {{"pid", r.pid}, {"fd", r.fd}, {"size", r.size}, {"offset", r.offset}};
}

}  // namespace

std::vector<std::string> capabilities() {
  return {"frames.v1",  "tensors.inline", "tensors.shm", "fuzz.builtin", "fuzz.script",
          "test_batch", "submit_outputs", "validate",     "calibrate",
          "minimize",   "reproduce",      "diagnose",     "failures",
          "lint",       "baselines",      "stats",        "shutdown"};
}

Result<Tensor> Frame::tensor(std::string_view key) const {
  auto it = tensors.find(key);
  if (it == tensors.end()) return frame_error("the message carries no tensor '" + std::string(key) + "'");
  return it->second;
}

std::size_t encode_to(const Frame& frame, const std::function<std::byte*(std::size_t)>& alloc,
                      ShmTarget* shm) {
  Json header = frame.header;
  Json descs = Json::array();
  std::size_t payload = 0;
  // Storages placed in the arena: written there now (the frame holds only their descriptors).
  std::vector<bool> inline_tensor;
  inline_tensor.reserve(frame.tensors.size());
  for (const auto& [key, t] : frame.tensors) {
    const std::size_t nbytes = t.storage_bytes();
    Json d = descriptor(key, t.dtype(), t.shape(), t.strides(), t.offset(), nbytes);
    if (shm && shm->data && nbytes >= shm->min_bytes && nbytes > 0) {
      const std::size_t at = align_up(shm->used);
      if (at <= shm->segment.size && nbytes <= shm->segment.size - at) {
        std::memcpy(shm->data + at, t.storage()->data(), nbytes);
        shm::SegmentRef ref = shm->segment;
        ref.offset = at;
        d["shm"] = shm_json(ref);
        shm->used = at + nbytes;
        ++shm->placed;
        descs.push_back(std::move(d));
        inline_tensor.push_back(false);
        continue;
      }
      shm->spilled += align_up(nbytes);
    }
    d["data_offset"] = payload;
    descs.push_back(std::move(d));
    inline_tensor.push_back(true);
    payload = align_up(payload + nbytes);
  }
  for (const auto& [key, t] : frame.shared) {
    Json d = descriptor(key, t.dtype, t.shape, t.strides, t.offset, t.bytes.size());
    d["shm"] = shm_json(t.ref);
    descs.push_back(std::move(d));
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
  std::size_t i = 0;
  for (const auto& [key, t] : frame.tensors) {  // each inline storage once, then its padding
    if (!inline_tensor[i++]) continue;
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

Result<Frame> decode(std::span<const std::byte> bytes, const DecodeOptions& options) {
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
    if (shape.size() != strides.size())
      return frame_error("tensor '" + key + "': shape and strides differ in rank");
    for (auto s : shape)
      if (s < 0) return frame_error("tensor '" + key + "': negative size in shape");
    if (static_cast<std::size_t>(nbytes) % dtype_size(*dt) != 0)
      return frame_error("tensor '" + key + "': storage_nbytes is not a multiple of the element size");
    if (d.contains("shm")) {
      if (d.contains("data_offset"))
        return frame_error("tensor '" + key + "' has both 'data_offset' and 'shm'");
      if (!options.resolve)
        return frame_error("tensor '" + key +
                           "' names shared memory, which this connection does not take (only "
                           "local clients that negotiated tensors.shm may send it)");
      GPUEMU_TRY(shm::SegmentRef ref, segment_ref(d, key));
      GPUEMU_TRY(SharedBytes sb, options.resolve(ref, static_cast<std::size_t>(nbytes)));
      if (sb.bytes.size() != static_cast<std::size_t>(nbytes))
        return frame_error("tensor '" + key + "': the segment gave " +
                           std::to_string(sb.bytes.size()) + " bytes for " +
                           std::to_string(nbytes));
      if (options.keep_shared) {
        GPUEMU_TRY_STATUS(check_view(*dt, shape, strides, offset, sb.bytes.size(), key));
        SharedTensor st{*dt, Shape(shape.begin(), shape.end()), std::move(strides), offset,
                        sb.bytes, ref, std::move(sb.keep)};
        if (frame.tensors.count(key) || !frame.shared.emplace(key, std::move(st)).second)
          return frame_error("tensor key '" + key + "' appears twice");
        continue;
      }
      // Borrowed (floating-point storages, when the receiver asks): the tensor reads the arena
      // itself, and the receiver owns (Storage::own) what it keeps past the request. Copied out
      // (integer and bool storages, always): indices and counts steer the judging code (a gather,
      // a bound checked once), so the bytes it checked are bytes the sender can no longer change.
      auto storage = options.borrow && is_floating(*dt)
                         ? Storage::borrow(sb.bytes, std::move(sb.keep))
                         : std::make_shared<Storage>(copy_out(sb.bytes));
      auto t = Tensor::view(*dt, shape, strides, offset, std::move(storage));
      if (!t) return frame_error("tensor '" + key + "': " + t.error().message);
      if (frame.shared.count(key) || !frame.tensors.emplace(key, std::move(t).value()).second)
        return frame_error("tensor key '" + key + "' appears twice");
      continue;
    }
    if (!d.contains("data_offset"))
      return frame_error("tensor '" + key + "' has neither 'data_offset' nor 'shm'");
    GPUEMU_TRY(auto at, int_field(d, "data_offset", key));
    if (static_cast<std::size_t>(at) % k_alignment != 0)
      return frame_error("tensor '" + key + "': data_offset is not 64-byte aligned");
    if (static_cast<std::size_t>(at) > payload ||
        static_cast<std::size_t>(nbytes) > payload - static_cast<std::size_t>(at))
      return frame_error("tensor '" + key + "': bytes [" + std::to_string(at) + ", " +
                 std::to_string(at + nbytes) + ") run past the payload of " +
                 std::to_string(payload) + " bytes");
    auto storage = std::make_shared<std::vector<std::byte>>(
        bytes.begin() + static_cast<std::ptrdiff_t>(head + at),
        bytes.begin() + static_cast<std::ptrdiff_t>(head + at + nbytes));
    auto t = Tensor::view(*dt, shape, strides, offset, std::move(storage));
    if (!t) return frame_error("tensor '" + key + "': " + t.error().message);
    if (frame.shared.count(key) || !frame.tensors.emplace(key, std::move(t).value()).second)
      return frame_error("tensor key '" + key + "' appears twice");
  }
  frame.header.erase("tensors");
  return frame;
}

Copied own_borrowed(const Frame& frame) {
  Copied c;
  for (const auto& [key, t] : frame.tensors) {
    const auto& s = t.storage();
    if (s && s->borrowed() && s.use_count() > 1) {
      s->own();
      ++c.tensors;
      c.bytes += s->size();
    }
  }
  return c;
}

Copied borrowed_in(const Frame& frame) {
  Copied c;
  for (const auto& [key, t] : frame.tensors)
    if (t.storage() && t.storage()->borrowed()) {
      ++c.tensors;
      c.bytes += t.storage()->size();
    }
  return c;
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
