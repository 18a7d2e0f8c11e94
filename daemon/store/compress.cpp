#include "compress.hpp"

#include <zstd.h>

namespace gpuemu::store_codec {

Status zstd_append_frame(std::string& out, std::span<const std::byte> data, int level) {
  const std::size_t start = out.size();
  const std::size_t bound = ZSTD_compressBound(data.size());
  if (ZSTD_isError(bound))
    return make_error(ErrorCode::invalid_argument,
                      "input of " + std::to_string(data.size()) + " bytes is too large for zstd");
  out.resize(start + bound);
  const std::size_t written =
      ZSTD_compress(out.data() + start, bound, data.data(), data.size(), level);
  if (ZSTD_isError(written)) {
    out.resize(start);
    return make_error(ErrorCode::internal,
                      std::string("zstd compression failed: ") + ZSTD_getErrorName(written));
  }
  out.resize(start + written);
  return {};
}

Result<std::vector<std::byte>> zstd_read_frame(std::string_view frame, std::size_t expected_size,
                                               const std::string& what) {
  auto damaged = [&](const std::string& why) {
    return make_error(ErrorCode::io_error, "store corrupted: " + what + ": " + why);
  };
  const unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (content == ZSTD_CONTENTSIZE_ERROR) return damaged("not a zstd frame");
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != expected_size)
    return damaged("frame holds " + std::to_string(content) + " bytes, record says " +
                   std::to_string(expected_size));
  const std::size_t frame_size = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  if (ZSTD_isError(frame_size)) return damaged(ZSTD_getErrorName(frame_size));
  if (frame_size != frame.size()) return damaged("trailing bytes after the zstd frame");

  std::vector<std::byte> out(expected_size);
  const std::size_t got = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(got)) return damaged(ZSTD_getErrorName(got));
  if (got != expected_size)
    return damaged("decompressed " + std::to_string(got) + " bytes, record says " +
                   std::to_string(expected_size));
  return out;
}

}  // namespace gpuemu::store_codec
