#include "ops/attention_emulation.hpp"

#include "ops/gemm_emulation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gpuemu::ops {
namespace {

constexpr float k_neg_inf_f = -std::numeric_limits<float>::infinity();
constexpr float k_log2e = 1.44269504088896340736f;

// The online-softmax state of one split of the keys.
struct Partial {
  float m = k_neg_inf_f;
  float l = 0.0f;
  std::vector<float> acc;
};

// Keys [j0, j1) of one row in BLOCK_N tiles.
void online_pass(const float* q, const float* kt, std::int64_t ld_kt, const float* v,
                 std::int64_t j0, std::int64_t j1, std::int64_t d, float score_scale,
                 DType input_dtype, const AttentionEmulation& cfg, Partial& st,
                 std::vector<float>& s) {
  st.acc.assign(static_cast<std::size_t>(d), 0.0f);
  const std::int64_t bn = std::max<std::int64_t>(cfg.block_n, 1);
  for (std::int64_t t = j0; t < j1; t += bn) {
    const std::int64_t t1 = std::min(j1, t + bn), w = t1 - t;
    // Scores of the tile: a sequential fp32 dot over D for each key (vectorised over keys).
    std::fill(s.begin(), s.begin() + w, 0.0f);
    for (std::int64_t c = 0; c < d; ++c) axpy_f32(q[c], kt + c * ld_kt + t, s.data(), w);
    float tile_max = k_neg_inf_f;
    for (std::int64_t j = 0; j < w; ++j) {
      s[j] *= score_scale;
      tile_max = std::isnan(s[j]) || std::isnan(tile_max) ? std::numeric_limits<float>::quiet_NaN()
                                                          : std::max(tile_max, s[j]);
    }
    const float m_new = std::isnan(tile_max) ? tile_max : std::max(st.m, tile_max);
    // While every score so far is -inf, exponentiate against 0 (FA2's Check_inf): the -inf
    // scores then weigh 0 instead of exp(-inf - -inf) = NaN.
    const float m_use = m_new == k_neg_inf_f ? 0.0f : m_new;
    const float alpha = cfg.exp2 ? std::exp2(st.m - m_use) : std::exp(st.m - m_use);
    float tile_sum = 0.0f;
    for (std::int64_t j = 0; j < w; ++j) {
      s[j] = cfg.exp2 ? std::exp2(s[j] - m_use) : std::exp(s[j] - m_use);
      tile_sum += s[j];
    }
    st.l = st.l * alpha + tile_sum;
    if (cfg.rescale_acc)
      for (std::int64_t c = 0; c < d; ++c) st.acc[c] *= alpha;
    for (std::int64_t j = 0; j < w; ++j) {
      const float pj = cfg.round_p ? round_lowp(input_dtype, s[j]) : s[j];
      axpy_f32(pj, v + (t + j) * d, st.acc.data(), d);
    }
    st.m = m_new;
  }
}

}  // namespace

void attention_row(const float* q, const float* kt, std::int64_t ld_kt, const float* v,
                   std::int64_t n, std::int64_t d, float scale, DType input_dtype,
                   const AttentionEmulation& cfg, float* out) {
  const float score_scale = cfg.exp2 ? scale * k_log2e : scale;
  std::vector<float> s(static_cast<std::size_t>(std::max<std::int64_t>(cfg.block_n, 1)));
  const std::int64_t bn = std::max<std::int64_t>(cfg.block_n, 1);
  const std::int64_t splits = std::max<std::int64_t>(cfg.kv_splits, 1);
  std::int64_t chunk = (n + splits - 1) / splits;
  chunk = std::max<std::int64_t>(bn, (chunk + bn - 1) / bn * bn);
  std::vector<Partial> parts;
  for (std::int64_t j0 = 0; j0 < n; j0 += chunk) {
    parts.emplace_back();
    online_pass(q, kt, ld_kt, v, j0, std::min(n, j0 + chunk), d, score_scale, input_dtype, cfg,
                parts.back(), s);
  }
  if (parts.empty()) {  // no attended key
    const float fill = cfg.zero_empty_rows ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    std::fill(out, out + d, fill);
    return;
  }
  if (parts.size() == 1) {
    const Partial& p = parts[0];
    // FA2 divides by 1 where the row sum is 0: acc holds 0 (0 * v), or NaN where a value is
    // non-finite (0 * Inf).
    const bool empty = p.l == 0.0f && cfg.zero_empty_rows;
    for (std::int64_t c = 0; c < d; ++c) out[c] = empty ? p.acc[c] : p.acc[c] / p.l;
    return;
  }
  // flash-decoding's combine: each split stores its normalised output and its lse in fp32.
  std::vector<float> lse(parts.size());
  float lse_max = k_neg_inf_f;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    lse[i] = parts[i].m + (cfg.exp2 ? std::log2(parts[i].l) : std::log(parts[i].l));
    lse_max = std::isnan(lse[i]) ? lse[i] : std::max(lse_max, lse[i]);
  }
  std::fill(out, out + d, 0.0f);
  float wsum = 0.0f;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].l == 0.0f) continue;  // a split whose keys all weigh 0 adds nothing
    float w = parts[i].l;
    if (cfg.split_max_correction)
      w = cfg.exp2 ? std::exp2(lse[i] - lse_max) : std::exp(lse[i] - lse_max);
    wsum += w;
    for (std::int64_t c = 0; c < d; ++c) out[c] += w * (parts[i].acc[c] / parts[i].l);
  }
  for (std::int64_t c = 0; c < d; ++c) out[c] /= wsum;
}

void attention_backward_head(const float* q, const float* k, const float* v, const float* dout,
                             const float* out, const float* lse, std::int64_t lq, std::int64_t lk,
                             std::int64_t d, float scale, bool causal, DType input_dtype,
                             const AttentionBackwardEmulation& cfg, float* dq, float* dk, float* dv) {
  std::fill(dq, dq + lq * d, 0.0f);
  std::fill(dk, dk + lk * d, 0.0f);
  std::fill(dv, dv + lk * d, 0.0f);
  if (lq <= 0 || lk <= 0 || d <= 0) return;
  const bool masked = causal && cfg.apply_causal;
  auto dot = [d](const float* a, const float* b) {
    float acc = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) acc += a[c] * b[c];
    return acc;
  };
  // Per row: D_i and the statistic P is recomputed against (in the kernel's base).
  std::vector<float> Di(static_cast<std::size_t>(lq)), stat(static_cast<std::size_t>(lq));
  const float score_scale = cfg.exp2 ? scale * k_log2e : scale;
  for (std::int64_t i = 0; i < lq; ++i) {
    float acc = 0.0f;
    for (std::int64_t c = 0; c < d; ++c) acc += cfg.d_uses_out ? dout[i * d + c] * out[i * d + c] : dout[i * d + c];
    Di[i] = acc;
    if (cfg.stats == AttnBackwardStats::max_only) {
      const std::int64_t n = masked ? std::min(i + 1, lk) : lk;
      float m = k_neg_inf_f;
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, dot(q + i * d, k + j * d) * score_scale);
      stat[i] = m;
    } else {
      stat[i] = cfg.exp2 ? lse[i] * k_log2e : lse[i];
    }
  }
  const std::int64_t bm = cfg.block_m > 0 ? cfg.block_m : lq, bn = cfg.block_n > 0 ? cfg.block_n : lk;
  std::vector<float> tile_dk(static_cast<std::size_t>(bn * d)), tile_dv(static_cast<std::size_t>(bn * d));
  std::vector<float> tile_dq(static_cast<std::size_t>(bm * d));
  for (std::int64_t j0 = 0; j0 < lk; j0 += bn) {
    const std::int64_t j1 = std::min(lk, j0 + bn);
    for (std::int64_t i0 = 0; i0 < lq; i0 += bm) {
      const std::int64_t i1 = std::min(lq, i0 + bm);
      if (masked && i1 - 1 < j0) continue;  // the tile lies wholly above the diagonal
      std::fill(tile_dk.begin(), tile_dk.end(), 0.0f);
      std::fill(tile_dv.begin(), tile_dv.end(), 0.0f);
      std::fill(tile_dq.begin(), tile_dq.end(), 0.0f);
      for (std::int64_t i = i0; i < i1; ++i) {
        const float* qi = q + i * d;
        const float* gi = dout + i * d;
        for (std::int64_t j = j0; j < j1; ++j) {
          if (masked && j > i) break;
          const float sraw = dot(qi, k + j * d);
          const float arg = cfg.stats == AttnBackwardStats::unscaled_lse ? sraw - stat[i]
                                                                          : sraw * score_scale - stat[i];
          const float p = cfg.exp2 ? std::exp2(arg) : std::exp(arg);
          const float pin = cfg.round_p ? round_lowp(input_dtype, p) : p;
          axpy_f32(pin, gi, tile_dv.data() + (j - j0) * d, d);
          const float dp = dot(gi, v + j * d);
          const float ds = p * (dp - Di[i]);
          const float dsin = cfg.round_ds ? round_lowp(input_dtype, ds) : ds;
          axpy_f32(dsin, qi, tile_dk.data() + (j - j0) * d, d);
          axpy_f32(dsin, k + j * d, tile_dq.data() + (i - i0) * d, d);
        }
      }
      add_f32(tile_dk.data(), dk + j0 * d, (j1 - j0) * d);
      add_f32(tile_dv.data(), dv + j0 * d, (j1 - j0) * d);
      add_f32(tile_dq.data(), dq + i0 * d, (i1 - i0) * d);
    }
  }
  for (std::int64_t x = 0; x < lk * d; ++x) dk[x] *= scale;
  if (cfg.dq_scaled)
    for (std::int64_t x = 0; x < lq * d; ++x) dq[x] *= scale;
}

}  // namespace gpuemu::ops
