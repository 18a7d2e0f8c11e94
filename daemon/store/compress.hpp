// zstd for the failure store's input bytes: one self-describing frame per record (the frame header
// carries the content size, checked against the size the record says it holds).
// Internal to gpuemu_store.
#pragma once

#include "gpuemu/base/error.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpuemu::store_codec {

// zstd's default level: fast, and random bytes cost nothing extra (stored as raw blocks).
inline constexpr int k_zstd_level = 3;

// Appends one zstd frame holding `data` to `out`.
Status zstd_append_frame(std::string& out, std::span<const std::byte> data,
                         int level = k_zstd_level);

// Decompresses one frame that must hold exactly `expected_size` bytes; anything else (a damaged
// frame, a different size, trailing bytes) is an io_error naming `what`.
Result<std::vector<std::byte>> zstd_read_frame(std::string_view frame, std::size_t expected_size,
                                               const std::string& what);

}  // namespace gpuemu::store_codec
