// The wire protocol between gpuemu's daemon and its clients (docs/protocol.md is the spec; the
// JSON Schema of every header is schemas/protocol.schema.json).
//
// A frame is
//   "GEMU" | u32 LE header length H | H bytes of UTF-8 JSON | zero padding to a multiple of 64 |
//   payload: each tensor's storage bytes at a 64-byte aligned offset
// The header names every tensor it carries ("tensors": [{key, dtype, shape, strides, offset,
// storage_nbytes, data_offset}]); bytes are little-endian, bfloat16 and fp8 as their bits. A tensor
// whose bytes lie in a shared-memory arena (gpuemu/protocol/shm.hpp) carries "shm": {pid, fd, size,
// offset} instead of data_offset.
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/op_schema.hpp"
#include "gpuemu/protocol/shm.hpp"
#include "gpuemu/engine/tensor.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace gpuemu::protocol {

inline constexpr char k_magic[4] = {'G', 'E', 'M', 'U'};
inline constexpr int k_protocol_version = 1;
inline constexpr std::size_t k_alignment = 64;
inline constexpr std::size_t k_max_header_bytes = std::size_t{16} << 20;  // 16 MiB of JSON
inline constexpr std::size_t k_max_frame_bytes = std::size_t{4} << 30;    // 4 GiB in all

// Capability names a daemon of this build announces in `hello` (tensors.shm among them: the
// envelope's shm_probe / shm_reply and "shm" descriptors, docs/protocol.md).
std::vector<std::string> capabilities();

// A tensor whose storage lies in a shared-memory arena and stays there: the Python client writes
// request tensors straight into its arena and hands reply bytes to numpy without a copy. `keep`
// holds the arena (and so marks it busy in its pool) for as long as the view is used.
struct SharedTensor {
  DType dtype = DType::float32;
  Shape shape;
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;
  std::span<std::byte> bytes;  // the whole storage
  shm::SegmentRef ref;         // the arena and the storage's byte offset in it
  std::shared_ptr<void> keep;
};

// A decoded frame: the JSON header and the tensors it carries, by key.
struct Frame {
  Json header = Json::object();
  std::map<std::string, Tensor, std::less<>> tensors;
  std::map<std::string, SharedTensor, std::less<>> shared;  // described, bytes in an arena

  void add(std::string key, Tensor t) { tensors.insert_or_assign(std::move(key), std::move(t)); }
  Result<Tensor> tensor(std::string_view key) const;  // protocol_error when absent
};

// Encodes a frame (the header gains "tensors"). Tensors are sent as their whole storage plus the
// view (strides, offset), so a non-contiguous input arrives with its real layout.
std::vector<std::byte> encode(const Frame& frame);

// Where an encoder may put large tensors instead of the frame: an arena (its own, or one the peer
// offered), described by `segment` (pid, fd, size; offset unused). Each storage of at least
// `min_bytes` is copied there, at 64-byte aligned offsets from `used`, while it fits; the rest
// travel inline. After encoding, `used` is the end of what was written and `spilled` the bytes of
// large storages that did not fit (the next arena should be that much larger).
struct ShmTarget {
  std::byte* data = nullptr;
  shm::SegmentRef segment;
  std::size_t min_bytes = shm::k_default_min_bytes;
  std::size_t used = 0;
  std::size_t spilled = 0;
  std::size_t placed = 0;  // storages written to the arena
};

// The same bytes written into a buffer the caller allocates: `alloc(n)` returns n writable bytes
// (an nng message's body: the transport sends it without another copy), every one of which is
// written. Returns n (0 when `alloc` returned nullptr: nothing is written). With `shm`, large
// storages go to its arena instead (above); `frame.shared` is always described, never copied.
std::size_t encode_to(const Frame& frame, const std::function<std::byte*(std::size_t)>& alloc,
                      ShmTarget* shm = nullptr);

// What a decoder does with a descriptor that names shared memory: `resolve` returns the bytes
// (checked against the segment: gpuemu/protocol/shm.hpp) and what keeps them mapped. Without a
// resolver such a descriptor is a protocol_error. `keep_shared`: such tensors stay in the arena
// (Frame::shared) instead of becoming Frame::tensors.
struct SharedBytes {
  std::span<std::byte> bytes;
  std::shared_ptr<void> keep;
};
struct DecodeOptions {
  std::function<Result<SharedBytes>(const shm::SegmentRef&, std::size_t nbytes)> resolve;
  bool keep_shared = false;
  // Floating-point storages in an arena become tensors that borrow the arena's bytes
  // (Storage::borrow) instead of copies; integer and bool storages are always copied. The
  // receiver calls own_borrowed (below) before the sender may reuse the arena.
  bool borrow = false;
};

// Makes every borrowed storage of `frame` that something besides the frame still holds (a
// tensor kept past the request) its holders' own bytes (Storage::own).
struct Copied {
  std::size_t tensors = 0, bytes = 0;
};
Copied own_borrowed(const Frame& frame);
// The storages of `frame` that borrow memory (their count and bytes).
Copied borrowed_in(const Frame& frame);

// Decodes and validates a frame: magic, sizes, JSON, every tensor descriptor against the payload
// (or, for a shared one, against its segment).
Result<Frame> decode(std::span<const std::byte> bytes, const DecodeOptions& options = {});
// The header alone: the magic, the header length and its JSON, nothing of the tensors (a tcp
// request's token is checked on it before the rest is decoded).
Result<Json> decode_header(std::span<const std::byte> bytes);

// A request: {"v":1, "method": M, "params": {...}, "token"?: T}.
Frame make_request(std::string method, Json params = Json::object());
// A successful reply {"v":1, "ok":true, "result":{...}} and an error reply.
Frame make_reply(Json result = Json::object());
Frame make_error_reply(const Error& error);
// The result of a reply frame, or its error (the wire code mapped back onto ErrorCode).
Result<Json> reply_result(const Frame& reply);

// ---- Structured values on the wire ----------------------------------------------------------
Json options_to_json(const FuzzOptions& options);
Result<FuzzOptions> options_from_json(const Json& j);

// A test case: its header part (everything but bytes) and its input tensors as "inputs/<name>".
// `digests`: each input's digest too (TestCase::describe).
Json case_to_json(const TestCase& c, bool digests = true);
void add_case_tensors(Frame& frame, const TestCase& c, const std::string& prefix = "inputs/");
Result<TestCase> case_from_frame(const Json& case_json, const Frame& frame,
                                 const std::string& prefix = "inputs/");

// The exact input bytes of a case, as stored with a failure: a frame holding case_to_json and the
// inputs. Deterministic: the same case gives the same bytes on every machine.
std::vector<std::byte> snapshot_case(const TestCase& c);
Result<TestCase> restore_case(std::span<const std::byte> snapshot);

// ---- Where a daemon lives ---------------------------------------------------------------------
struct HomePaths {
  std::string home;       // $GPUEMU_HOME, or $XDG_STATE_HOME/gpuemu, or ~/.local/state/gpuemu
  std::string run_dir;    // home/run (0700)
  std::string socket;     // home/run/gpuemu.sock
  std::string url;        // ipc://<socket>
  std::string lock;       // home/run/gpuemu.lock
  std::string info;       // home/run/daemon.json (pid, socket, version, started)
  std::string logs_dir;   // home/logs
  std::string store_dir;  // home/store
};
HomePaths home_paths();
HomePaths home_paths(const std::string& home);

}  // namespace gpuemu::protocol
