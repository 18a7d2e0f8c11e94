// flash_attention [q[B,H,Lq,D], k[B,Hkv,Lk,D], v[B,Hkv,Lk,D]; causal, scale, enable_gqa] with
// torch.nn.functional.scaled_dot_product_attention semantics, and decode_attention
// [q[B,H,D], k_cache[B,Hkv,L,D], v_cache[B,Hkv,L,D], seq_lens[B]; scale] where batch b attends
// to its first seq_lens[b] cached positions (GQA: query head h reads KV head h / (H / Hkv)).
// References: attention_reference.hpp (fp64 through dgemm, condition terms explained there).
// Controls: online-softmax flash kernels over BLOCK_N = 64 / 128 tiles with P rounded to the input
// dtype or kept in fp32, the exp2 formulation, and flash-decoding split-KV. Buggy kernels: missing
// 1/sqrt(D), missing `acc *= alpha`, causal off-by-one, bottom-right causal alignment, wrong GQA
// head mapping, seq_lens ignored or off by one, split-KV combined without the max correction.
#include "core/parallel.hpp"
#include "ops/attention_emulation.hpp"
#include "ops/attention_reference.hpp"
#include "ops/gemm_blas.hpp"
#include "ops/gemm_emulation.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpuemu::ops {
namespace {

using KernelOut = Result<std::vector<std::vector<double>>>;

constexpr double k_u_fp32_attn = 0x1.0p-24;

Error shape_error(const std::string& msg) {
  return make_error(ErrorCode::shape_mismatch, msg);
}

double resolve_scale(const RefContext& ctx, std::int64_t d) {
  if (ctx.attr_is_null("scale")) return 1.0 / std::sqrt(static_cast<double>(d));
  return ctx.attr_float("scale");
}

// The shapes of either op, as batches of heads: decode is flash with Lq = 1 per head.
struct AttnProblem {
  std::int64_t B = 0, H = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0;
  double scale = 1.0;
  bool causal = false;
  const double *q = nullptr, *k = nullptr, *v = nullptr;
  std::vector<std::int64_t> seq_lens;  // decode only: keys attended per batch
  Shape out_shape;
  std::int64_t group() const { return H / Hkv; }
  std::int64_t kv_head(std::int64_t h) const { return h / group(); }
};

// q [..., H, Lq, D], k and v [..., Hkv, Lk, D], as SDPA: any number of leading batch dims (none
// included), the same for all three; B is their product.
Result<AttnProblem> flash_problem(const RefContext& ctx) {
  const RefArg &q = ctx.input("q"), &k = ctx.input("k"), &v = ctx.input("v");
  const std::size_t rank = q.shape.size();
  if (rank < 3 || k.shape.size() != rank || v.shape != k.shape)
    return shape_error(
        "flash_attention needs q[..., H, Lq, D] and k, v [..., Hkv, Lk, D] of one shape, with the "
        "same leading batch dims; got " +
        shape_to_string(q.shape) + ", " + shape_to_string(k.shape) + ", " +
        shape_to_string(v.shape));
  AttnProblem p;
  p.B = 1;
  for (std::size_t i = 0; i + 3 < rank; ++i) p.B *= q.shape[i];
  p.H = q.shape[rank - 3], p.Lq = q.shape[rank - 2], p.D = q.shape[rank - 1];
  p.Hkv = k.shape[rank - 3], p.Lk = k.shape[rank - 2];
  if (!std::equal(q.shape.begin(), q.shape.end() - 3, k.shape.begin()) ||
      k.shape[rank - 1] != p.D)
    return shape_error("flash_attention: q " + shape_to_string(q.shape) + " and k " +
                       shape_to_string(k.shape) + " disagree on the batch dims or D");
  const bool gqa = ctx.attr_bool("enable_gqa");
  if (!gqa && p.Hkv != p.H)
    return shape_error("flash_attention: Hkv (" + std::to_string(p.Hkv) + ") must equal H (" +
                       std::to_string(p.H) + ") unless enable_gqa");
  if (p.Hkv <= 0 || p.H % p.Hkv != 0)
    return shape_error("flash_attention: H (" + std::to_string(p.H) +
                       ") must be a multiple of Hkv (" + std::to_string(p.Hkv) + ")");
  p.scale = resolve_scale(ctx, p.D);
  p.causal = ctx.attr_bool("causal");
  p.q = q.data.data(), p.k = k.data.data(), p.v = v.data.data();
  p.out_shape = q.shape;
  return p;
}

Result<AttnProblem> decode_problem(const RefContext& ctx) {
  const RefArg &q = ctx.input("q"), &k = ctx.input("k_cache"), &v = ctx.input("v_cache");
  const RefArg& lens = ctx.input("seq_lens");
  if (q.shape.size() != 3 || k.shape.size() != 4 || v.shape != k.shape)
    return shape_error(
        "decode_attention needs q[B,H,D] and k_cache, v_cache [B,Hkv,L,D] of one "
        "shape; got " +
        shape_to_string(q.shape) + ", " + shape_to_string(k.shape) + ", " +
        shape_to_string(v.shape));
  AttnProblem p;
  p.B = q.shape[0], p.H = q.shape[1], p.D = q.shape[2], p.Lq = 1;
  p.Hkv = k.shape[1], p.Lk = k.shape[2];
  if (k.shape[0] != p.B || k.shape[3] != p.D || lens.shape != Shape{p.B})
    return shape_error("decode_attention: q " + shape_to_string(q.shape) + ", k_cache " +
                       shape_to_string(k.shape) + " and seq_lens " + shape_to_string(lens.shape) +
                       " disagree on B or D");
  if (p.Hkv <= 0 || p.H % p.Hkv != 0)
    return shape_error("decode_attention: H (" + std::to_string(p.H) +
                       ") must be a multiple of Hkv (" + std::to_string(p.Hkv) + ")");
  for (std::int64_t b = 0; b < p.B; ++b) {
    const double n = lens.data[b];
    if (!(n >= 1 && n <= static_cast<double>(p.Lk)) || n != std::floor(n))
      return make_error(ErrorCode::invalid_argument,
                        "decode_attention: seq_lens[" + std::to_string(b) + "] = " +
                            std::to_string(n) + " is not in [1, L = " + std::to_string(p.Lk) + "]");
    p.seq_lens.push_back(static_cast<std::int64_t>(n));
  }
  p.scale = resolve_scale(ctx, p.D);
  p.q = q.data.data(), p.k = k.data.data(), p.v = v.data.data();
  p.out_shape = q.shape;
  return p;
}

const double* kv_block(const AttnProblem& p, const double* base, std::int64_t b, std::int64_t hk) {
  return base + (b * p.Hkv + hk) * p.Lk * p.D;
}

// The cache past seq_lens[b] takes no part in a decode step; a kernel that scores the whole cache
// and masks by adding -Inf (softmax(q·Kᵀ + mask)·V) gives NaN where a key there holds a
// non-finite value (its score +Inf or NaN plus -Inf: the whole row), where a finite score there
// overflows fp32 (its products' magnitudes summed, unscaled or scaled, within a factor 2 of fp32's
// largest value, as in attention_block_reference), or where a value there does (0·Inf: that
// column). Those NaNs are accepted alternatives, on the group's rows at `alt`; `q` is the group's
// first query row.
// Under a precision policy whose operand rounding overflows (`overflow`, finite), a cached operand
// there that reaches it is Inf in such a kernel: the same NaN (attention_policy_overflow).
void beyond_length_alternatives(const AttnProblem& p, std::int64_t b, std::int64_t hk,
                                const double* q, std::uint8_t* alt, double overflow) {
  const double* k = kv_block(p, p.k, b, hk);
  const double* v = kv_block(p, p.v, b, hk);
  bool keys_nan = false;
  std::vector<char> col_nan(static_cast<std::size_t>(p.D), 0);
  for (std::int64_t j = p.seq_lens[b]; j < p.Lk; ++j)
    for (std::int64_t c = 0; c < p.D; ++c) {
      keys_nan |= !std::isfinite(k[j * p.D + c]) || std::fabs(k[j * p.D + c]) >= overflow;
      col_nan[static_cast<std::size_t>(c)] |= !std::isfinite(v[j * p.D + c]) || std::fabs(v[j * p.D + c]) >= overflow;
    }
  const double fp32_max = static_cast<double>(std::numeric_limits<float>::max());
  const double abs_scale = std::max(1.0, std::fabs(p.scale));
  for (std::int64_t h = 0; h < p.group(); ++h) {
    bool row_nan = keys_nan;
    for (std::int64_t j = p.seq_lens[b]; j < p.Lk && !row_nan; ++j) {
      double e = 0.0;
      for (std::int64_t c = 0; c < p.D; ++c) e += std::fabs(q[h * p.D + c] * k[j * p.D + c]);
      row_nan = std::isfinite(e) && abs_scale * e >= fp32_max / 2;
    }
    for (std::int64_t c = 0; c < p.D; ++c)
      if (row_nan || col_nan[static_cast<std::size_t>(c)]) alt[h * p.D + c] |= k_alt_nan;
  }
}

Result<std::vector<RefOutput>> reference(const RefContext& ctx, bool decode) {
  GPUEMU_TRY(AttnProblem p, decode ? decode_problem(ctx) : flash_problem(ctx));
  const auto n = static_cast<std::size_t>(shape_numel(p.out_shape));
  RefVec out(n), c_acc(n), c_in(n);
  const DTypeInfo& in = dtype_info(ctx.input("q").dtype);
  // The tail term of c_acc reads c_in as Σ p|v| too; the flush weight only adds to it (looser).
  const double p_min_normal = in.min_normal,
               p_flush_weight = in.is_floating && in.unit_roundoff > 0
                                    ? in.min_subnormal / 2 / in.unit_roundoff : 0.0;
  std::vector<std::uint8_t> alt(n, 0);
  auto block = [&](AttentionBlock blk) {
    blk.alt = alt.data() + (blk.out - out.data());
    blk.p_min_normal = p_min_normal;
    blk.p_flush_weight = p_flush_weight >= 0x1.0p-60 ? p_flush_weight : 0.0;
    blk.policy_weight = policy_weight(ctx);
    blk.operand_floor = ctx.operand_floor, blk.operand_roundoff = ctx.operand_roundoff;
    attention_block_reference(blk);
    attention_policy_overflow(blk, ctx.operand_overflow);
  };
  for (std::int64_t b = 0; b < p.B; ++b) {
    if (decode) {  // one block per KV head: its group of query heads against the valid prefix
      for (std::int64_t hk = 0; hk < p.Hkv; ++hk) {
        const std::int64_t row0 = (b * p.H + hk * p.group()) * p.D;
        block({p.q + row0, kv_block(p, p.k, b, hk), kv_block(p, p.v, b, hk), p.group(),
               p.seq_lens[b], p.D, p.scale, false, out.data() + row0, c_acc.data() + row0,
               c_in.data() + row0});
        beyond_length_alternatives(p, b, hk, p.q + row0, alt.data() + row0, ctx.operand_overflow);
      }
    } else {
      for (std::int64_t h = 0; h < p.H; ++h) {
        const std::int64_t row0 = (b * p.H + h) * p.Lq * p.D;
        const std::int64_t hk = p.kv_head(h);
        block({p.q + row0, kv_block(p, p.k, b, hk), kv_block(p, p.v, b, hk), p.Lq, p.Lk, p.D,
               p.scale, p.causal, out.data() + row0, c_acc.data() + row0, c_in.data() + row0});
      }
    }
  }
  return single_output(ctx.output_dtype(), p.out_shape, std::move(out), std::move(c_acc),
                       std::move(c_in), std::move(alt));
}

enum class AttnBug {
  none,
  missing_scale,        // softmax(q·kᵀ) without 1/sqrt(D) (or the given scale)
  causal_strict,        // mask `offs_m > offs_n`: row i misses its own key, row 0 has none
  causal_bottom_right,  // FA2's alignment (key j <= i + Lk - Lq), not SDPA's top-left
  gqa_head_mod,         // KV head h % Hkv instead of h / (H / Hkv)
  ignore_seq_lens,      // decode attends to all L cached positions
  seq_len_off_by_one,   // decode attends to seq_len + 1 positions (`offs_n <= seq_len`)
};

// Keys attended by query row i of head h in batch b, under the kernel's (possibly buggy) logic.
std::int64_t kernel_keys(const AttnProblem& p, bool decode, AttnBug bug, std::int64_t b,
                         std::int64_t i) {
  if (decode) {
    if (bug == AttnBug::ignore_seq_lens) return p.Lk;
    if (bug == AttnBug::seq_len_off_by_one) return std::min(p.Lk, p.seq_lens[b] + 1);
    return p.seq_lens[b];
  }
  if (!p.causal) return p.Lk;
  if (bug == AttnBug::causal_strict) return std::min(i, p.Lk);
  if (bug == AttnBug::causal_bottom_right)
    return std::clamp<std::int64_t>(i + 1 + p.Lk - p.Lq, 0, p.Lk);
  return attended_keys(i, p.Lk, true);
}

KernelFn emulated(bool decode, AttentionEmulation cfg, AttnBug bug = AttnBug::none) {
  return [=](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(AttnProblem p, decode ? decode_problem(ctx) : flash_problem(ctx));
    AttentionEmulation run = cfg;
    if (bug == AttnBug::causal_bottom_right) run.zero_empty_rows = true;
    const float scale = bug == AttnBug::missing_scale ? 1.0f : f32(p.scale);
    const std::vector<float> q = to_f32(p.q, shape_numel(p.out_shape));
    const std::vector<float> v = to_f32(p.v, p.B * p.Hkv * p.Lk * p.D);
    std::vector<float> kt(static_cast<std::size_t>(p.B * p.Hkv * p.Lk * p.D));
    for (std::int64_t bh = 0; bh < p.B * p.Hkv; ++bh) {
      const std::vector<float> t = transpose_to_f32(p.k + bh * p.Lk * p.D, p.Lk, p.D);
      std::copy(t.begin(), t.end(), kt.begin() + bh * p.Lk * p.D);
    }
    const DType out_dtype = ctx.output_dtype();
    std::vector<double> out(q.size());
    const std::int64_t rows = p.B * p.H * p.Lq;
    parallel_for(
        rows,
        [&](std::int64_t r0, std::int64_t r1) {
          std::vector<float> o(static_cast<std::size_t>(p.D));
          for (std::int64_t r = r0; r < r1; ++r) {
            const std::int64_t i = r % p.Lq, h = (r / p.Lq) % p.H, b = r / (p.Lq * p.H);
            const std::int64_t hk = bug == AttnBug::gqa_head_mod ? h % p.Hkv : p.kv_head(h);
            const std::int64_t kv = (b * p.Hkv + hk) * p.Lk * p.D;
            attention_row(q.data() + r * p.D, kt.data() + kv, p.Lk, v.data() + kv,
                          kernel_keys(p, decode, bug, b, i), p.D, scale, ctx.case_dtype, run,
                          o.data());
            for (std::int64_t c = 0; c < p.D; ++c)
              out[r * p.D + c] = round_to(out_dtype, static_cast<double>(o[c]));
          }
        },
        std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(1, p.Lk * p.D)));
    return std::vector<std::vector<double>>{std::move(out)};
  };
}

AttentionEmulation flash(std::int64_t block_n, bool round_p, bool exp2 = false) {
  AttentionEmulation e;
  e.block_n = block_n;
  e.round_p = round_p;
  e.exp2 = exp2;
  return e;
}

AttentionEmulation split_kv(std::int64_t splits, bool round_p, bool max_correction = true) {
  AttentionEmulation e = flash(64, round_p);
  e.kv_splits = splits;
  e.split_max_correction = max_correction;
  return e;
}

// FA2 and PyTorch's SDPA backends: a row whose every score is -inf gets zeros, not 0/0.
AttentionEmulation zero_masked_rows(AttentionEmulation e) {
  e.zero_empty_rows = true;
  return e;
}

AttentionEmulation no_rescale(std::int64_t block_n) {
  AttentionEmulation e = flash(block_n, true);
  e.rescale_acc = false;
  return e;
}

BuiltinOp make_flash() {
  BuiltinOp op;
  op.name = "flash_attention";
  op.reference = [](const RefContext& ctx) { return reference(ctx, false); };
  op.controls = {
      {"flash_bn64_p_rounded",
       "online softmax over BLOCK_N=64, P rounded to the input dtype "
       "before P·V (FA2 / Triton)",
       emulated(false, flash(64, true))},
      {"flash_bn128_p_rounded", "online softmax over BLOCK_N=128, P rounded to the input dtype",
       emulated(false, flash(128, true))},
      {"flash_bn64_fp32_p", "online softmax over BLOCK_N=64, P kept in fp32",
       emulated(false, flash(64, false))},
      {"flash_exp2_bn128", "Triton tutorial form: scores times scale·log2(e), exp2, P rounded",
       emulated(false, flash(128, true, true))},
      {"flash_bn64_zero_masked_rows",
       "BLOCK_N=64 online softmax returning zeros for a row whose scores are all -inf "
       "(FA2, PyTorch's SDPA safe softmax)",
       emulated(false, zero_masked_rows(flash(64, true)))},
  };
  op.buggy = {
      {"missing_scale", "softmax(q·kᵀ) without the 1/sqrt(D) scale",
       emulated(false, flash(64, true), AttnBug::missing_scale)},
      {"online_no_rescale",
       "BLOCK_N=64 online softmax that forgets `acc *= alpha` (l is "
       "rescaled): wrong once the max rises after the first tile (Lk > 64)",
       emulated(false, no_rescale(64))},
      {"causal_off_by_one",
       "causal mask `offs_m > offs_n`: each row misses its own key, row 0 "
       "attends nothing (0/0)",
       emulated(false, flash(64, true), AttnBug::causal_strict)},
      {"causal_bottom_right",
       "causal mask aligned bottom-right (FA2 convention) instead of SDPA's "
       "top-left: wrong whenever Lq != Lk",
       emulated(false, flash(64, true), AttnBug::causal_bottom_right)},
      {"gqa_head_mod", "KV head h % Hkv instead of h / (H / Hkv) (enable_gqa, Hkv > 1, H > Hkv)",
       emulated(false, flash(64, true), AttnBug::gqa_head_mod)},
  };
  return op;
}

BuiltinOp make_decode() {
  BuiltinOp op;
  op.name = "decode_attention";
  op.reference = [](const RefContext& ctx) { return reference(ctx, true); };
  op.controls = {
      {"single_pass_bn64_p_rounded",
       "one pass over the valid prefix, BLOCK_N=64, P rounded to "
       "the input dtype",
       emulated(true, flash(64, true))},
      {"split_kv4_p_rounded", "flash-decoding: 4 KV splits, partial (out, lse) combined in fp32",
       emulated(true, split_kv(4, true))},
      {"split_kv16_fp32_p", "flash-decoding: 16 KV splits of BLOCK_N=64 tiles, P kept in fp32",
       emulated(true, split_kv(16, false))},
      {"exp2_bn128", "exp2 form over BLOCK_N=128, P rounded",
       emulated(true, flash(128, true, true))},
  };
  op.buggy = {
      {"ignore_seq_lens", "attends to all L cached positions, ignoring seq_lens",
       emulated(true, flash(64, true), AttnBug::ignore_seq_lens)},
      {"seq_len_off_by_one", "attends to seq_lens[b] + 1 positions (`offs_n <= seq_len`)",
       emulated(true, flash(64, true), AttnBug::seq_len_off_by_one)},
      {"gqa_head_mod", "KV head h % Hkv instead of h / (H / Hkv) (Hkv > 1, H > Hkv)",
       emulated(true, flash(64, true), AttnBug::gqa_head_mod)},
      {"split_kv_no_rescale", "4 KV splits combined with weights l_s, without exp(m_s - m_max)",
       emulated(true, split_kv(4, true, false))},
      {"missing_scale", "softmax(q·kᵀ) without the 1/sqrt(D) scale",
       emulated(true, flash(64, true), AttnBug::missing_scale)},
  };
  return op;
}

// ---- flash_attention_backward --------------------------------------------------------------
// grad_out, q [B, H, Lq, D], k, v [B, Hkv, Lk, D], the saved out [B, H, Lq, D] and lse [B, H, Lq];
// outputs grad_q, grad_k, grad_v. Reference: attention_backward_block_reference, one query head at
// a time, grad_k and grad_v summed over each KV head's group. Controls: FlashAttention-2 / Triton
// style tiled fp32 backward kernels (attention_backward_head). Buggy: dq without the scale, P
// recomputed from the wrong statistics, D without out, the causal mask not applied, GQA's grad_k
// and grad_v from the first head of each group only.

struct AttnBwdProblem {
  std::int64_t B = 0, H = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0;
  double scale = 1.0;
  bool causal = false;
  const double *g = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr;
  Shape q_shape, kv_shape;
  // Without the saved out and lse (autograd's mode: the case pins them absent), the exact forward
  // of q, k, v computed here (attn_bwd_exact_forward), which o and lse then point into, and the
  // forward's c_in of out.
  bool from_inputs = false;
  RefVec own_o, own_lse, own_o_c_in;
  std::int64_t group() const { return H / Hkv; }
};

Result<AttnBwdProblem> attn_bwd_problem(const RefContext& ctx) {
  const RefArg &g = ctx.input("grad_out"), &q = ctx.input("q"), &k = ctx.input("k"), &v = ctx.input("v");
  if (ctx.has_input("out") != ctx.has_input("lse"))
    return shape_error("flash_attention_backward takes the saved out and lse together, or neither (autograd's "
                       "mode: the reference computes the forward of q, k, v)");
  const bool saved = ctx.has_input("out");
  const RefArg* o = saved ? &ctx.input("out") : nullptr;
  const RefArg* lse = saved ? &ctx.input("lse") : nullptr;
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape != k.shape || g.shape != q.shape ||
      k.shape[0] != q.shape[0] || k.shape[3] != q.shape[3] ||
      (saved && (o->shape != q.shape || lse->shape != Shape{q.shape[0], q.shape[1], q.shape[2]})))
    return shape_error(
        "flash_attention_backward needs grad_out, q and out [B, H, Lq, D], k and v [B, Hkv, Lk, D] "
        "and lse [B, H, Lq]; got grad_out " + shape_to_string(g.shape) + ", q " + shape_to_string(q.shape) +
        ", k " + shape_to_string(k.shape) + ", v " + shape_to_string(v.shape) +
        (saved ? ", out " + shape_to_string(o->shape) + ", lse " + shape_to_string(lse->shape) : std::string()));
  AttnBwdProblem p;
  p.B = q.shape[0], p.H = q.shape[1], p.Lq = q.shape[2], p.D = q.shape[3];
  p.Hkv = k.shape[1], p.Lk = k.shape[2];
  if (!ctx.attr_bool("enable_gqa") && p.Hkv != p.H)
    return shape_error("flash_attention_backward: Hkv (" + std::to_string(p.Hkv) + ") must equal H (" +
                       std::to_string(p.H) + ") unless enable_gqa");
  if (p.Hkv <= 0 || p.H % p.Hkv != 0)
    return shape_error("flash_attention_backward: H (" + std::to_string(p.H) +
                       ") must be a multiple of Hkv (" + std::to_string(p.Hkv) + ")");
  p.scale = resolve_scale(ctx, p.D);
  p.causal = ctx.attr_bool("causal");
  p.g = g.data.data(), p.q = q.data.data(), p.k = k.data.data(), p.v = v.data.data();
  if (saved) p.o = o->data.data(), p.lse = lse->data.data();
  p.from_inputs = !saved;
  p.q_shape = q.shape, p.kv_shape = k.shape;
  return p;
}

// flash_attention_backward without the saved out and lse (autograd's mode: the kernel's own forward
// made them): the exact forward of the case's q, k, v in fp64, as attention's own reference (out,
// with the forward's c_in kept for the backward's model) and lse = m + log sum_j exp(s_ij - m) over
// the attended keys (NaN where a score is, -Inf over no key), unrounded. p.o and p.lse point there.
void attn_bwd_exact_forward(const RefContext& ctx, AttnBwdProblem& p) {
  if (!p.from_inputs) return;
  const std::int64_t nq = shape_numel(p.q_shape), qh = p.Lq * p.D, kh = p.Lk * p.D;
  p.own_o.assign(static_cast<std::size_t>(nq), 0.0);
  p.own_o_c_in.assign(static_cast<std::size_t>(nq), 0.0);
  p.own_lse.assign(static_cast<std::size_t>(p.B * p.H * p.Lq), 0.0);
  const DTypeInfo& in = dtype_info(ctx.input("q").dtype);
  const double flush_w = in.is_floating && in.unit_roundoff > 0 ? in.min_subnormal / 2 / in.unit_roundoff : 0.0;
  RefVec c_acc(static_cast<std::size_t>(qh));
  std::vector<double> sc(static_cast<std::size_t>(std::max<std::int64_t>(p.Lk, 1)));
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t h = 0; h < p.H; ++h) {
      const std::int64_t q0 = (b * p.H + h) * qh, kv0 = (b * p.Hkv + h / p.group()) * kh;
      AttentionBlock blk;
      blk.q = p.q + q0, blk.k = p.k + kv0, blk.v = p.v + kv0;
      blk.lq = p.Lq, blk.lk = p.Lk, blk.d = p.D, blk.scale = p.scale, blk.causal = p.causal;
      blk.out = p.own_o.data() + q0, blk.c_acc = c_acc.data(), blk.c_in = p.own_o_c_in.data() + q0;
      blk.p_min_normal = in.min_normal;
      blk.p_flush_weight = flush_w >= 0x1.0p-60 ? flush_w : 0.0;
      blk.policy_weight = policy_weight(ctx);
      attention_block_reference(blk);
      for (std::int64_t i = 0; i < p.Lq; ++i) {
        const double* qr = p.q + q0 + i * p.D;
        const std::int64_t n = attended_keys(i, p.Lk, p.causal);
        double m = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (std::int64_t c = 0; c < p.D; ++c) dot += qr[c] * p.k[kv0 + j * p.D + c];
          sc[static_cast<std::size_t>(j)] = dot * p.scale;
          nan |= std::isnan(sc[static_cast<std::size_t>(j)]);
          m = std::max(m, sc[static_cast<std::size_t>(j)]);
        }
        double l = 0.0;
        for (std::int64_t j = 0; j < n; ++j) l += std::exp(sc[static_cast<std::size_t>(j)] - m);
        p.own_lse[static_cast<std::size_t>((b * p.H + h) * p.Lq + i)] =
            nan ? std::numeric_limits<double>::quiet_NaN() : n == 0 ? -std::numeric_limits<double>::infinity()
                                                                   : m + std::log(l);
      }
    }
  p.o = p.own_o.data(), p.lse = p.own_lse.data();
}

Result<std::vector<RefOutput>> attn_bwd_reference(const RefContext& ctx) {
  GPUEMU_TRY(AttnBwdProblem p, attn_bwd_problem(ctx));
  attn_bwd_exact_forward(ctx, p);
  const std::int64_t nq = shape_numel(p.q_shape), nkv = shape_numel(p.kv_shape);
  RefVec dq(nq), cdq(nq), idq(nq), dk(nkv), cdk(nkv), idk(nkv), dv(nkv), cdv(nkv), idv(nkv);
  const DTypeInfo& in = dtype_info(ctx.input("q").dtype);
  const double flush_w = in.is_floating && in.unit_roundoff > 0 ? in.min_subnormal / 2 / in.unit_roundoff : 0.0;
  const bool lowp_in = in.is_floating && in.unit_roundoff > k_u_fp32_attn;
  std::vector<std::uint8_t> alt_q(static_cast<std::size_t>(nq), 0), alt_k(static_cast<std::size_t>(nkv), 0),
      alt_v(static_cast<std::size_t>(nkv), 0);
  const std::int64_t qh = p.Lq * p.D, kh = p.Lk * p.D;
  for (std::int64_t b = 0; b < p.B; ++b)
    for (std::int64_t hk = 0; hk < p.Hkv; ++hk) {
      const std::int64_t h0 = hk * p.group(), kv0 = (b * p.Hkv + hk) * kh;
      // Non-finite inputs anywhere in the group: a kernel's masked products (0·Inf), its softmax
      // recomputation or its sums may turn them into any non-finite value in any of the group's
      // gradients; the reference's own non-finite results may also be zeros (FA2's empty rows).
      bool special = !all_finite(p.k + kv0, kh) || !all_finite(p.v + kv0, kh);
      for (std::int64_t h = h0; h < h0 + p.group() && !special; ++h) {
        const std::int64_t q0 = (b * p.H + h) * qh;
        special = !all_finite(p.q + q0, qh) || !all_finite(p.g + q0, qh) || !all_finite(p.o + q0, qh) ||
                  !all_finite(p.lse + (b * p.H + h) * p.Lq, p.Lq);
      }
      double max_mid = 0.0;
      std::vector<std::uint8_t> ovf_k(static_cast<std::size_t>(p.Lk), 0);
      std::vector<std::uint8_t> ovf_q(static_cast<std::size_t>(p.Lq * p.group()), 0);
      // Under a precision policy whose operand rounding overflows, an operand of the backward's
      // GEMMs that reaches the threshold is Inf there (attention_policy_overflow for the
      // forward): in k or v, every row's scores or dP, so every gradient of the group; in q_i or
      // dO_i, row i's P or dP (a pre-scaled q as in the forward), so grad_q's row i and, through
      // dS and P, every key's grad_k and grad_v. Any non-finite result is accepted there.
      const double thr = ctx.operand_overflow;
      bool policy_all = std::isfinite(thr) && (reaches_policy_overflow(p.k + kv0, kh, thr) ||
                                               reaches_policy_overflow(p.v + kv0, kh, thr));
      std::vector<std::uint8_t> policy_q(static_cast<std::size_t>(p.Lq * p.group()), std::uint8_t{policy_all});
      bool policy_kv = policy_all;
      if (std::isfinite(thr) && !policy_all) {
        const double q_thr = thr / std::max(1.0, std::fabs(p.scale) * 1.4426950408889634);
        for (std::int64_t h = h0; h < h0 + p.group(); ++h)
          for (std::int64_t i = 0; i < p.Lq; ++i) {
            const std::int64_t at = (b * p.H + h) * qh + i * p.D;
            if (reaches_policy_overflow(p.q + at, p.D, q_thr) || reaches_policy_overflow(p.g + at, p.D, thr))
              policy_q[static_cast<std::size_t>((h - h0) * p.Lq + i)] = std::uint8_t{1}, policy_kv = true;
          }
      }
      std::vector<std::uint8_t> unres_k(static_cast<std::size_t>(p.Lk), 0);
      for (std::int64_t h = h0; h < h0 + p.group(); ++h) {
        const std::int64_t q0 = (b * p.H + h) * qh;
        AttentionBackwardBlock blk;
        blk.q = p.q + q0, blk.dout = p.g + q0, blk.out = p.o + q0, blk.lse = p.lse + (b * p.H + h) * p.Lq;
        blk.out_c_in = p.from_inputs ? p.own_o_c_in.data() + q0 : nullptr;
        blk.k = p.k + kv0, blk.v = p.v + kv0;
        blk.lq = p.Lq, blk.lk = p.Lk, blk.d = p.D, blk.scale = p.scale, blk.causal = p.causal;
        blk.kv_rows = p.group() * p.Lq;
        blk.p_min_normal = in.min_normal;
        blk.p_flush_weight = flush_w;
        blk.policy_weight = policy_weight(ctx);
        blk.dq = dq.data() + q0, blk.c_acc_dq = cdq.data() + q0, blk.c_in_dq = idq.data() + q0;
        blk.dk = dk.data() + kv0, blk.c_acc_dk = cdk.data() + kv0, blk.c_in_dk = idk.data() + kv0;
        blk.dv = dv.data() + kv0, blk.c_acc_dv = cdv.data() + kv0, blk.c_in_dv = idv.data() + kv0;
        blk.max_intermediate = &max_mid;
        blk.in_max = lowp_in ? in.max_finite : 0.0;
        blk.ds_overflow_q = ovf_q.data() + (h - h0) * p.Lq;
        blk.ds_overflow_k = ovf_k.data();
        blk.unresolved_q = ovf_q.data() + (h - h0) * p.Lq;  // grad_q's rows: any non-finite, as an overflow
        blk.unresolved_k = unres_k.data();
        blk.special = special;
        attention_backward_block_reference(blk);
      }
      // The group's outputs: fp32 intermediates that may overflow make them indeterminate
      // (overflow_guard); dS rounded to a 16-bit input dtype may overflow it (Inf, then NaN).
      // A bound past fp64's range (capped condition terms times inputs near fp32's) stays a
      // finite huge number: the verdict reads a finite c_acc past fp32's range as indeterminate.
      auto finish = [&](RefVec& val, RefVec& c_acc, RefVec& c_in, std::vector<std::uint8_t>& alt,
                        std::int64_t at, std::int64_t n, const std::uint8_t* ovf_rows) {
        for (std::int64_t x = at; x < at + n; ++x) {
          c_acc[x] = overflow_guard(std::min(c_acc[x], 1e300), max_mid);
          c_in[x] = std::min(c_in[x], 1e300);
          if (special) alt[x] |= static_cast<std::uint8_t>(k_alt_any_nonfinite | (std::isfinite(val[x]) ? 0 : k_alt_zero));
          if (ovf_rows && ovf_rows[(x - at) / p.D]) alt[x] |= k_alt_any_nonfinite;
        }
      };
      for (std::size_t r = 0; r < ovf_q.size(); ++r) ovf_q[r] |= policy_q[r];
      for (std::int64_t h = h0; h < h0 + p.group(); ++h)
        finish(dq, cdq, idq, alt_q, (b * p.H + h) * qh, qh, ovf_q.data() + (h - h0) * p.Lq);
      if (policy_kv) std::fill(unres_k.begin(), unres_k.end(), std::uint8_t{1});
      for (std::int64_t j = 0; j < p.Lk; ++j) ovf_k[j] |= unres_k[j];
      finish(dk, cdk, idk, alt_k, kv0, kh, ovf_k.data());
      finish(dv, cdv, idv, alt_v, kv0, kh, unres_k.data());
    }
  auto output = [&](const char* name, std::size_t index, const Shape& shape, RefVec v, RefVec c, RefVec i,
                    std::vector<std::uint8_t> alt) {
    RefOutput r;
    r.name = name;
    r.dtype = ctx.output_dtype(index);
    r.shape = shape;
    r.value = std::move(v);
    r.c_acc = std::move(c);
    r.c_in = std::move(i);
    r.alt_nonfinite = std::move(alt);
    return r;
  };
  std::vector<RefOutput> outs;
  outs.push_back(output("grad_q", 0, p.q_shape, std::move(dq), std::move(cdq), std::move(idq), std::move(alt_q)));
  outs.push_back(output("grad_k", 1, p.kv_shape, std::move(dk), std::move(cdk), std::move(idk), std::move(alt_k)));
  outs.push_back(output("grad_v", 2, p.kv_shape, std::move(dv), std::move(cdv), std::move(idv), std::move(alt_v)));
  return outs;
}

enum class AttnBwdBug { none, gqa_first_head };

KernelFn attn_bwd_emulated(AttentionBackwardEmulation cfg, AttnBwdBug bug = AttnBwdBug::none) {
  return [=](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(AttnBwdProblem p, attn_bwd_problem(ctx));
    attn_bwd_exact_forward(ctx, p);  // without the saved out and lse: the exact ones
    const std::int64_t nq = shape_numel(p.q_shape), nkv = shape_numel(p.kv_shape);
    const std::int64_t qh = p.Lq * p.D, kh = p.Lk * p.D;
    const std::vector<float> q = to_f32(p.q, nq), g = to_f32(p.g, nq), o = to_f32(p.o, nq);
    const std::vector<float> k = to_f32(p.k, nkv), v = to_f32(p.v, nkv);
    const std::vector<float> lse = to_f32(p.lse, p.B * p.H * p.Lq);
    std::vector<float> dq(static_cast<std::size_t>(nq)), dk_h(static_cast<std::size_t>(p.B * p.H * kh)),
        dv_h(static_cast<std::size_t>(p.B * p.H * kh));
    const float scale = f32(p.scale);
    parallel_for(
        p.B * p.H,
        [&](std::int64_t h0, std::int64_t h1) {
          for (std::int64_t bh = h0; bh < h1; ++bh) {
            const std::int64_t b = bh / p.H, h = bh % p.H;
            const std::int64_t kv0 = (b * p.Hkv + h / p.group()) * kh;
            attention_backward_head(q.data() + bh * qh, k.data() + kv0, v.data() + kv0, g.data() + bh * qh,
                                    o.data() + bh * qh, lse.data() + bh * p.Lq, p.Lq, p.Lk, p.D, scale,
                                    p.causal, ctx.case_dtype, cfg, dq.data() + bh * qh,
                                    dk_h.data() + bh * kh, dv_h.data() + bh * kh);
          }
        },
        1);
    // grad_k and grad_v: each query head's fp32 partial summed over the group in fp32, as autograd
    // sums repeat_interleave's copies (the bug keeps the group's first head alone).
    std::vector<float> dk(static_cast<std::size_t>(nkv), 0.0f), dv(static_cast<std::size_t>(nkv), 0.0f);
    for (std::int64_t bh = 0; bh < p.B * p.H; ++bh) {
      const std::int64_t b = bh / p.H, h = bh % p.H;
      if (bug == AttnBwdBug::gqa_first_head && h % p.group() != 0) continue;
      const std::int64_t kv0 = (b * p.Hkv + h / p.group()) * kh;
      add_f32(dk_h.data() + bh * kh, dk.data() + kv0, kh);
      add_f32(dv_h.data() + bh * kh, dv.data() + kv0, kh);
    }
    auto rounded = [](DType dt, const std::vector<float>& x) {
      std::vector<double> r(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) r[i] = round_to(dt, static_cast<double>(x[i]));
      return r;
    };
    return std::vector<std::vector<double>>{rounded(ctx.output_dtype(0), dq), rounded(ctx.output_dtype(1), dk),
                                            rounded(ctx.output_dtype(2), dv)};
  };
}

AttentionBackwardEmulation attn_bwd_tiles(std::int64_t bm, std::int64_t bn, bool round_p, bool round_ds,
                                          bool exp2 = false) {
  AttentionBackwardEmulation e;
  e.block_m = bm, e.block_n = bn, e.round_p = round_p, e.round_ds = round_ds, e.exp2 = exp2;
  return e;
}

BuiltinOp make_flash_backward() {
  BuiltinOp op;
  op.name = "flash_attention_backward";
  op.reference = attn_bwd_reference;
  const AttentionBackwardEmulation fa2 = attn_bwd_tiles(64, 64, true, true);
  op.controls = {
      {"fa2_bm64_bn64_p_ds_rounded",
       "FlashAttention-2 style: BLOCK_M=BLOCK_N=64 tiles, P = exp(s - lse) in fp32, P and dS rounded "
       "to the input dtype before the dV and dQ/dK GEMMs",
       attn_bwd_emulated(fa2)},
      {"triton_exp2_bm32_bn128",
       "Triton tutorial form: exp2(s*scale*log2(e) - lse*log2(e)) over BLOCK_M=32 x BLOCK_N=128 tiles, "
       "P and dS rounded to the input dtype",
       attn_bwd_emulated(attn_bwd_tiles(32, 128, true, true, true))},
      {"fp32_plain", "plain fp32: P and dS kept in fp32, one sequential pass over keys and rows",
       attn_bwd_emulated(attn_bwd_tiles(0, 0, false, false))},
  };
  auto with = [&](auto change) {
    AttentionBackwardEmulation e = fa2;
    change(e);
    return attn_bwd_emulated(e);
  };
  op.buggy = {
      {"dq_missing_scale", "grad_q without the final scale (dq = dS K)",
       with([](AttentionBackwardEmulation& e) { e.dq_scaled = false; })},
      {"p_unscaled_scores", "P recomputed as exp(q.k - lse): the scale left out of the recomputed scores",
       with([](AttentionBackwardEmulation& e) { e.stats = AttnBackwardStats::unscaled_lse; })},
      {"p_max_only", "P recomputed as exp(s - m) with the row max only, the log-sum ignored",
       with([](AttentionBackwardEmulation& e) { e.stats = AttnBackwardStats::max_only; })},
      {"d_without_out", "D_i = rowsum(dO) instead of rowsum(dO * out)",
       with([](AttentionBackwardEmulation& e) { e.d_uses_out = false; })},
      {"causal_not_applied", "the causal mask not applied in the backward (causal cases)",
       with([](AttentionBackwardEmulation& e) { e.apply_causal = false; })},
      {"gqa_first_head_only", "GQA: grad_k and grad_v from the first query head of each group, not the group's sum",
       attn_bwd_emulated(fa2, AttnBwdBug::gqa_first_head)},
  };
  return op;
}

}  // namespace

void register_attention_ops(BuiltinRegistry& r) {
  r.add(make_flash());
  r.add(make_decode());
  r.add(make_flash_backward());
}

}  // namespace gpuemu::ops
