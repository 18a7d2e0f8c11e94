// The fp64 reference of one attention block (one batch and query head, or one KV group of a
// decode step) with the condition terms of the error model, through OpenBLAS.
//
// Semantics: softmax(scale·q·kᵀ) over the keys each query row may attend, times v. Row i attends
// keys [0, n_i): n_i = min(i + 1, Lk) under a (top-left aligned, as in SDPA) causal mask, else Lk.
// Masked keys take no part at all (they are not "multiplied by zero": an Inf or NaN in a masked
// key or value does not reach the output, as in flash kernels and as a decode step must ignore
// the cache beyond its length); the NaN that the math formulation softmax(QKᵀ + mask)·V gives there
// (0·Inf, +Inf − Inf) is an accepted alternative result. A NaN among the attended scores makes the row NaN; so does an
// all -Inf row (exp(-inf - -inf)), as torch.softmax does.
//
// Condition terms (docs/error-model.md), with p the fp64 probabilities, s the scaled scores,
// m_i the row max and e_ij = |scale|·(|q_i|·|k_j|)·sqrt(D) the fp32 score dot product's own
// condition:
//   c_in[i,d]  = Σ_j (p_ij + [p_ij < min normal]·f)·|v_jd|  (P rounded to the input dtype before
//                P·V; f = half the dtype's subnormal spacing over u_in, see p_flush_weight)
//   c_acc[i,d] = Σ_j p_ij·|v_jd|·(2·sqrt(n_i) + |s_ij − m_i| + e_ij + ē_i),  ē_i = Σ_j p_ij·e_ij
// A flash kernel accumulates Σ_j exp(s_ij − m)·v_jd before dividing by l_i = Σ_j exp(s_ij − m),
// m the running max, so each weight is at most 1: where Σ_j |v_jd| reaches a quarter of fp32's
// range, c_acc becomes it (overflow_guard; the verdict reads it as indeterminate); so it does where
// an unscaled dot product max_j |q_i|·|k_j| reaches it (kernels that apply the scale after the dot
// overflow there although the scaled score fits).
// A score error δ_ij moves p_ij by p_ij·(δ_ij − Σ_k p_ik δ_ik), so out moves by at most
// Σ_j p_ij|v_jd|(|δ_ij| + Σ_k p_ik|δ_ik|); δ_ij is u_fp32·e_ij from the fp32 dot, plus
// u_fp32·|s_ij − m_i| from exp's argument (online rescaling at most doubles it); the fp32 sums of
// P·V and of the denominator add u_fp32·sqrt(n_i)·Σ_j p_ij|v_jd| each.
// That first-order analysis holds while the score errors are small. When u_fp32·max_j(e_ij +
// |s_ij − m_i|) exceeds 2 nats (scores near fp32's range, from boundary-value inputs; the bound
// overstates the typical score error several times), fp32 cannot tell which keys dominate: any
// convex combination of the attended values is then what a correct kernel may return, and the
// scores may overflow fp32. Such a row gets c_acc += (max_j |v_jd|)/u_fp32 + max_j e_ij (the
// second term lets the verdict's fp32-overflow rule apply).
#pragma once

#include <cstdint>

namespace gpuemu::ops {

struct AttentionBlock {
  const double* q = nullptr;  // [lq, d] contiguous
  const double* k = nullptr;  // [lk, d] contiguous
  const double* v = nullptr;  // [lk, d] contiguous
  std::int64_t lq = 0, lk = 0, d = 0;
  double scale = 1.0;
  bool causal = false;
  double* out = nullptr;    // [lq, d]
  double* c_acc = nullptr;  // [lq, d]
  double* c_in = nullptr;   // [lq, d]
  // P rounded to the input dtype loses a probability below that dtype's smallest normal to its
  // subnormal spacing (fp16: p < 2^-14 keeps only 2^-25 absolute; below 2^-25 it flushes to 0):
  // such keys weigh p_flush_weight = (min subnormal / 2) / u_in in c_in instead of nothing more
  // than p. 0 for a dtype whose normal range covers every p a row can hold (bf16: 2^-126).
  double p_min_normal = 0.0, p_flush_weight = 0.0;
  // [lq, d], or null: k_alt_* bits of the non-finite results a correct kernel may return where an
  // infinite or NaN value meets a probability so small that a kernel's fp32 exp underflows it, or
  // its input-dtype P flushes it, to 0 (0·Inf = NaN where the reference has p·Inf = Inf).
  std::uint8_t* alt = nullptr;
  // policy_weight(ctx) of a precision policy (gemm_blas.hpp): the scores' dot products gain
  // that weight of |scale|·(|q_i|·|k_j|) beside sqrt(D), and the P·V product that weight of
  // Σ_j p_ij|v_jd| beside its 2·sqrt(n_i). 0 under IEEE.
  double policy_weight = 0.0;
  // A policy's absolute operand error (RefContext::operand_floor, eta: TF32's subnormal spacing
  // 2^-136; 0 under IEEE and for 16-bit operands) and its relative one (operand_roundoff, u):
  // an operand x below fp32's smallest normal converts with an error up to s(x) = min(|x|, eta),
  // which no relative term bounds (gemm_blas.hpp's subnormal_error). The score of (i, j) gains
  // |scale|·Σ_d ((2 + u)·s(q_id)·|k_jd| + (1 + u)·|q_id|·s(k_jd)) of absolute error, and the P·V
  // product Σ_j ((2 + u)·s(p_ij)·|v_jd| + (1 + u)·p_ij·s(v_jd)) (P and V are its operands: a
  // probability below 2^-126 times a value near fp32's range loses up to 2^-136 of it).
  double operand_floor = 0.0, operand_roundoff = 0.0;
};

// The number of keys row i attends.
inline std::int64_t attended_keys(std::int64_t i, std::int64_t lk, bool causal) {
  return causal ? (i + 1 < lk ? i + 1 : lk) : lk;
}

void attention_block_reference(const AttentionBlock& blk);

// Under a precision policy whose operand rounding overflows (RefContext::operand_overflow: an fp32
// operand of 3.40199e38 or more is Inf in TF32; gemm_ops.cpp's policy_overflow for the GEMMs), the
// outputs an Inf operand can reach become any non-finite value (k_alt_any_nonfinite in blk.alt;
// finite results are judged as usual). A q row holding one makes its scores ±Inf or NaN, so its
// softmax and output row NaN; so does q times the scale (and log2(e), the exp2 form) where a kernel
// scales q before the dot. A k row holding one does it to every row's scores: a masked key's too,
// in the math formulation (+Inf plus the -Inf mask). A value v_jd holding one makes column d of
// every row ±Inf, or NaN where its probability is 0 (0·Inf, masked keys included). Where a q or k
// operand reaches a row, a score of -Inf may also drop its key: any convex combination of the
// values is admitted there too (c_acc += max_j |v_jd|/u_fp32, as for a row fp32 cannot resolve).
// Nothing is marked
// when the threshold is infinite (IEEE, 16-bit operands) or no operand reaches it.
void attention_policy_overflow(const AttentionBlock& blk, double threshold);

// The same rule for one operand row: whether any of its `n` values reaches `threshold`.
bool reaches_policy_overflow(const double* x, std::int64_t n, double threshold);

// flash_attention_backward's fp64 reference for one query head against its KV head, with the
// condition terms of the error model. The saved out and lse are used as given:
//   P_ij = exp(s_ij − lse_i) over the attended keys j < n_i (masked keys take no part), s = scale·q·kᵀ
//   dV = Pᵀ·dO, dP = dO·Vᵀ, D_i = Σ_d dO_id·out_id, dS = P∘(dP − D), dQ = scale·dS·K, dK = scale·dSᵀ·Q
// Condition terms (docs/error-model.md, "flash_attention_backward"), in units of u_fp32 (c_acc) or
// of the input dtype's u (c_in), with e_ij = |scale|·(|q_i|·|k_j|)·sqrt(D), ē_i = Σ_j P_ij e_ij,
// A_ij = |dO_i|·|v_j| and Dabs_i = Σ_d |dO_id·out_id|:
//   P recomputed in fp32 from s and lse: exp's argument is off by at most
//     w_ij = e_ij + ē_i + 3|s_ij| + 2|lse_i| + 2·sqrt(n_i) + 2
//   (the fp32 dot, the scaling, the subtraction, the exp2 form's two products by log2(e), exp's
//   own rounding; ē_i and sqrt(n_i) cover kernels that recompute the softmax from the max and the
//   row sum instead), so P_ij by P_ij·expm1(u·w_ij)/u (first order u·w_ij; taken to all orders so
//   that scores fp32 cannot resolve make the bound grow, not break; exp(s_ij − lse_i + u·w_ij)/u
//   where P_ij underflows fp64, so that such a score may still carry probability; plus 1/u for
//   every key of a row where a score's fp32 dot product may overflow, since a -Inf score drops its
//   key and leaves the others any normalized P);
//   dS: c_acc = δP_ij·|dP_ij − D_i| + P_ij·(sqrt(D)·A_ij + (sqrt(D) + 1)·Dabs_i + R_i + |dP_ij| +
//     |D_i|) + |dS_ij|, R_i = Σ_j P_ij·(δP_ij/P_ij + 2·sqrt(n_i))·A_ij (D recomputed as
//     rowsum(dO∘(P·V)) by a kernel that does not read the saved out);
//     c_in = P_ij·(Dabs_i + Σ_d |dO_id|·[|out_id| < min normal]·f) (the saved out's rounding to the
//     input dtype moves D by at most u_in·Dabs_i, or by half a subnormal spacing times |dO|)
//     + |dS_ij|' (dS rounded to the input dtype before the dQ/dK GEMMs; |x|' = |x| plus the
//     subnormal flush weight below the dtype's smallest normal);
//   grad_q: c_acc = |scale|·(C_dS + (sqrt(n) + 1)·|dS|)·|K|, c_in = |scale|·C_in,dS·|K|;
//   grad_k: the same with Q over the group's rows (sqrt(G·Lq)); grad_v: c_acc = (δP + (sqrt(G·Lq)
//   + 1)·P)ᵀ·|dO|, c_in = P'ᵀ·|dO| (P rounded to the input dtype before the dV GEMM).
struct AttentionBackwardBlock {
  const double* q = nullptr;     // [lq, d]
  const double* dout = nullptr;  // [lq, d]
  const double* out = nullptr;   // [lq, d] the saved output
  const double* lse = nullptr;   // [lq] the saved natural-log log-sum-exp
  // [lq, d], or null: the forward's c_in of out where the reference computed out itself (the case
  // without the saved out and lse: autograd's mode). The kernel's own forward saved an out that
  // may carry u_in·c_in_fwd (P rounded to the input dtype before P·V: Σ_j p_ij'|v_jd|, the flush
  // weight below the normal range), which moves D by u_in·Σ_d |dO_id|·c_in_fwd[i,d]: dS's c_in
  // gains P_ij times it. (Its fp32 part is R's, its own rounding Dabs's, lse's fp32 error w's.)
  const double* out_c_in = nullptr;
  const double* k = nullptr;     // [lk, d]
  const double* v = nullptr;     // [lk, d]
  std::int64_t lq = 0, lk = 0, d = 0;
  double scale = 1.0;
  bool causal = false;
  // The number of rows the dK/dV GEMMs sum over (the group's query heads times lq).
  std::int64_t kv_rows = 0;
  // As AttentionBlock's, for P and dS; kept for bf16 too (2^-126): a key whose every P is tiny has
  // a grad_v that small, and P's flush to bf16's subnormals is then its whole error.
  double p_min_normal = 0.0, p_flush_weight = 0.0;
  double policy_weight = 0.0;
  // grad_q of this head (written) and grad_k, grad_v of its KV head (added to: the group sums).
  double *dq = nullptr, *c_acc_dq = nullptr, *c_in_dq = nullptr;
  double *dk = nullptr, *c_acc_dk = nullptr, *c_in_dk = nullptr;
  double *dv = nullptr, *c_acc_dv = nullptr, *c_in_dv = nullptr;
  // The largest fp32 intermediate (unscaled dot products, dP, D, dS) this head forms, for the
  // overflow guard; and whether some |dS_ij| may overflow the input dtype when rounded to it
  // (in_max: that dtype's largest finite value): then grad_q's row i and grad_k's row j are marked
  // in ds_overflow_q [lq] / ds_overflow_k [lk] (may be null). A masked pair's dP = dO·v within a
  // factor 2 of fp32's largest value marks its row and every key (0·Inf in a kernel that masks
  // after the dot, and in softmax backward's row sum).
  double* max_intermediate = nullptr;
  double in_max = 0.0;
  std::uint8_t* ds_overflow_q = nullptr;
  std::uint8_t* ds_overflow_k = nullptr;
  // Pairs whose P fp32 cannot resolve (argument error past 2 nats): a correct kernel's P may be
  // anything there, Inf included, and its gradients of row i (grad_q) and key j (grad_k, grad_v)
  // non-finite; marked in unresolved_q [lq] and unresolved_k [lk] (may be null). A masked score
  // within a factor 2 of fp32's largest value marks its row and every key (+Inf meets the -Inf mask).
  std::uint8_t* unresolved_q = nullptr;
  std::uint8_t* unresolved_k = nullptr;
  // Inputs hold non-finite values: values by plain loops over the attended pairs only (a dgemm
  // would turn a masked 0 times Inf into NaN) and the condition terms from finite parts only.
  bool special = false;
};

void attention_backward_block_reference(const AttentionBackwardBlock& blk);

}  // namespace gpuemu::ops
