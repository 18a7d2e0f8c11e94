// libFuzzer target: the protocol decoder (docs/protocol.md, "Framing") on arbitrary bytes. Every
// input is either refused with a protocol_error or decoded into a frame that encodes and decodes
// back to the same header and the same tensor bytes; the header-only decoder a tcp request's
// token is read with agrees with the full one on the header. Any other outcome aborts.
#include "gpuemu/protocol/protocol.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_frame: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuemu;
  const auto bytes = std::span(reinterpret_cast<const std::byte*>(data), size);
  auto header = protocol::decode_header(bytes);
  auto frame = protocol::decode(bytes);
  if (!frame) {
    if (frame.error().code != ErrorCode::protocol_error) fail("a refusal that is not a protocol_error");
    return 0;
  }
  if (!header) fail("the header-only decoder refuses a frame the full one accepts");
  Json h = *header;
  h.erase("tensors");
  if (h != frame->header) fail("the header-only decoder disagrees with the full one");
  const auto again = protocol::decode(protocol::encode(*frame));
  if (!again) fail("a decoded frame does not decode after encoding");
  if (again->header != frame->header) fail("the header changed over a round trip");
  if (again->tensors.size() != frame->tensors.size()) fail("tensors lost over a round trip");
  for (const auto& [key, t] : frame->tensors) {
    auto it = again->tensors.find(key);
    if (it == again->tensors.end()) fail("a tensor key lost over a round trip");
    if (it->second.dtype() != t.dtype() || it->second.shape() != t.shape())
      fail("a tensor's dtype or shape changed over a round trip");
  }
  (void)protocol::reply_result(*frame);
  return 0;
}
