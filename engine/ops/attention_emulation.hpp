// Attention kernels emulated on the CPU the way flash-attention and flash-decoding kernels compute
// one query row: keys in BLOCK_N tiles, fp32 scores (a sequential fp32 dot over D), an online
// softmax (running max m, running sum l, accumulator rescaled by alpha = exp(m_old - m_new)),
// probabilities optionally rounded to the input dtype before the P·V product (as FA2 and Triton
// kernels do), and for split-KV (flash-decoding) per-split partials combined through their
// log-sum-exp. The same engine runs the buggy variants (no `acc *= alpha`, split partials combined
// without the max correction).
#pragma once

#include "gpuemu/engine/dtype.hpp"

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

// flash_attention_backward's kernels, one query head against its KV head, the way FlashAttention-2's
// and Triton's fused-attention backward compute it: D_i = Σ_d dO·out in fp32; for each BLOCK_N tile
// of keys and each BLOCK_M tile of query rows, the scores by fp32 dots over D, P recomputed in fp32
// from the saved lse (exp(s·scale − lse), or the tutorial's exp2(s·scale·log2(e) − lse·log2(e))),
// dV += P'ᵀ·dO (P' = P rounded to the input dtype when round_p), dP = dO·Vᵀ, dS = P∘(dP − D),
// dK += dS'ᵀ·Q and dQ += dS'·K (dS' = dS rounded to the input dtype when round_ds), each tile's
// product summed in fp32 and added to the fp32 accumulator; dQ and dK scaled at the end. Masked
// pairs take no part. The same engine runs the buggy variants.
enum class AttnBackwardStats {
  lse,            // P = exp(s·scale − lse): correct
  unscaled_lse,   // bug: P = exp(q·k − lse), the scale left out of the recomputed scores
  max_only,       // bug: P = exp(s·scale − m_i), the row max only (the log-sum ignored)
};

struct AttentionBackwardEmulation {
  std::int64_t block_m = 64, block_n = 64;  // 0: the whole length as one tile
  bool round_p = true;    // P rounded to the input dtype before the dV GEMM
  bool round_ds = true;   // dS rounded to the input dtype before the dQ and dK GEMMs
  bool exp2 = false;      // the Triton tutorial's base-2 form
  AttnBackwardStats stats = AttnBackwardStats::lse;
  bool dq_scaled = true;  // bug when false: dQ without the final scale
  bool d_uses_out = true; // bug when false: D_i = Σ_d dO (out not read)
  bool apply_causal = true;  // bug when false: the causal mask not applied in the backward
};

// q, dout, out [lq, d], lse [lq], k, v [lk, d], all fp32 (the kernel's inputs as floats); writes
// dq [lq, d] and dk, dv [lk, d] in fp32 (dq, dk scaled), not yet rounded to the output dtype.
void attention_backward_head(const float* q, const float* k, const float* v, const float* dout,
                             const float* out, const float* lse, std::int64_t lq, std::int64_t lk,
                             std::int64_t d, float scale, bool causal, DType input_dtype,
                             const AttentionBackwardEmulation& cfg, float* dq, float* dk, float* dv);

}  // namespace gpuemu::ops
