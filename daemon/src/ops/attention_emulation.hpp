// Attention kernels emulated on the CPU the way flash-attention and flash-decoding kernels compute
// one query row: keys in BLOCK_N tiles, fp32 scores (a sequential fp32 dot over D), an online
// softmax (running max m, running sum l, accumulator rescaled by alpha = exp(m_old - m_new)),
// probabilities optionally rounded to the input dtype before the P·V product (as FA2 and Triton
// kernels do), and for split-KV (flash-decoding) per-split partials combined through their
// log-sum-exp. The same engine runs the buggy variants (no `acc *= alpha`, split partials combined
// without the max correction).
#pragma once

#include "gpuemu/dtype.hpp"

#include <cstdint>

namespace gpuemu::ops {

struct AttentionEmulation {
  std::int64_t block_n = 64;
  bool round_p = true;         // P rounded to the input dtype before the P·V product
  bool exp2 = false;           // scores scaled by scale·log2(e) in fp32 and exponentiated by exp2
  std::int64_t kv_splits = 1;  // flash-decoding: keys split in this many chunks, combined by lse
  bool rescale_acc = true;     // bug when false: `acc *= alpha` forgotten (l is still rescaled)
  bool split_max_correction = true;  // bug when false: split partials weighted by l_s alone
  bool zero_empty_rows = false;      // a row with no attended key, or only -inf scores, yields 0 (FA2), else 0/0 = NaN
};

// One query row q[0..d) against keys [0, n): kt is Kᵀ as floats, [d, ld_kt] (key j in column j),
// v is [>= n, d] floats. Writes out[0..d) in fp32 (not yet rounded to the output dtype).
void attention_row(const float* q, const float* kt, std::int64_t ld_kt, const float* v,
                   std::int64_t n, std::int64_t d, float scale, DType input_dtype,
                   const AttentionEmulation& cfg, float* out);

}  // namespace gpuemu::ops
