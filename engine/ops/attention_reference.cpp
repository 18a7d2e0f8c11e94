#include "ops/attention_reference.hpp"

#include "gpuemu/engine/op.hpp"
#include "ops/gemm_blas.hpp"
#include "ops/gpu_oracle.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gpuemu::ops {
namespace {

constexpr double k_u_fp32 = 0x1.0p-24;

// s(x) of attention_reference.hpp's operand_floor: the policy's absolute conversion error of an
// fp32 operand below the smallest normal (0 for normal values, zeros and non-finite ones).
inline double floor_error(double x, double eta) {
  const double m = std::fabs(x);
  return (m > 0.0 && m < 0x1.0p-126) ? std::min(m, eta) : 0.0;
}

// s(x) over n values, or empty when none is subnormal (then its terms are 0: nothing to add).
RefVec floor_errors(const double* x, std::int64_t n, double eta) {
  RefVec r;
  for (std::int64_t i = 0; i < n; ++i)
    if (const double e = floor_error(x[i], eta); e > 0.0) {
      if (r.empty()) r.assign(static_cast<std::size_t>(n), 0.0);
      r[static_cast<std::size_t>(i)] = e;
    }
  return r;
}

}  // namespace

void attention_block_reference(const AttentionBlock& blk) {
  const std::int64_t lq = blk.lq, lk = blk.lk, d = blk.d;
  if (lq <= 0 || d <= 0) return;
  // The same block on the GPU (finite, large enough), but for a policy's subnormal floor, which
  // only this path adds.
  const double eta = blk.operand_floor;
  if (eta == 0.0 && gpu_oracle::attention(blk)) return;
  const RefVec abs_k = abs_copy(blk.k, lk * d), abs_v = abs_copy(blk.v, lk * d);
  // The floor's parts (attention_reference.hpp): s(k) and s(v) for the block, s(q) per chunk,
  // s(p) per row; |v| with its non-finite entries as 0 (those are judged by the alternatives).
  // wa = (2 + u)/u_fp32 weighs s(first operand)·|second|, wb = (1 + u)/u_fp32 the other way round
  // (in u_fp32 units); folded into the s(k) and s(v) copies here, into s(q) and s(p) below.
  const double wa = (2.0 + blk.operand_roundoff) / k_u_fp32, wb = (1.0 + blk.operand_roundoff) / k_u_fp32;
  RefVec floor_k = eta > 0.0 ? floor_errors(blk.k, lk * d, eta) : RefVec{};
  RefVec floor_v = eta > 0.0 ? floor_errors(blk.v, lk * d, eta) : RefVec{};
  for (auto* f : {&floor_k, &floor_v})
    for (auto& x : *f) x *= wb;
  RefVec finite_abs_v;
  // With a causal mask, P's masked zeros meet every value row in a dgemm: an Inf or NaN there
  // would leak (0·Inf). Then the masked products are skipped row by row instead.
  const bool row_wise_pv = blk.causal && !all_finite(blk.v, lk * d);
  const double root_d = sqrt_len(d) + blk.policy_weight, abs_scale = std::fabs(blk.scale);
  const std::int64_t chunk =
      std::max<std::int64_t>(1, std::min(lq, (1 << 18) / std::max<std::int64_t>(lk, 1)));
  const auto buf = static_cast<std::size_t>(chunk * std::max<std::int64_t>(lk, 1));
  std::vector<double> S(buf), E(buf), P(buf), W(buf), tail(static_cast<std::size_t>(chunk));
  const bool v_finite = all_finite(blk.v, lk * d);
  // Per column of v, the last key holding a non-finite value (-1: none): the masked keys j >= n_i
  // of row i hold one when this is >= n_i.
  std::vector<std::int64_t> last_nonfinite_v(static_cast<std::size_t>(d), -1);
  if (!v_finite)
    for (std::int64_t j = 0; j < lk; ++j)
      for (std::int64_t c = 0; c < d; ++c)
        if (!std::isfinite(blk.v[j * d + c])) last_nonfinite_v[c] = j;
  std::vector<double> sum_abs_v(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t j = 0; j < lk; ++j)
    for (std::int64_t c = 0; c < d; ++c) sum_abs_v[c] += abs_v[j * d + c];
  // Below this a probability may become 0 in a correct kernel (fp32 exp underflow, with the score
  // error's margin, or the input dtype's flush).
  const double p_vanish = std::max(0x1.0p-100, blk.p_flush_weight > 0.0 ? blk.p_min_normal : 0.0);
  const bool flush = blk.p_flush_weight > 0.0;
  std::vector<double> P_in(flush ? buf : 0);  // P's weights in c_in (P itself when !flush)
  // Rows fp32 cannot resolve (see the header), and their largest score condition.
  std::vector<char> unresolved(static_cast<std::size_t>(chunk));
  std::vector<double> e_max_row(static_cast<std::size_t>(chunk));
  // max_j |q_i|·|k_j| over the attended keys, unscaled: kernels that scale after the dot product
  // (s = (q·k)·scale: SDPA's math backend, compositions) form it in fp32 first.
  std::vector<double> dot_max_row(static_cast<std::size_t>(chunk));
  RefVec prefix_max_v;  // [lk, d]: max_{j' <= j} |v_j'd|, built on first need
  for (std::int64_t r0 = 0; r0 < lq; r0 += chunk) {
    const std::int64_t rows = std::min(chunk, lq - r0);
    const double* q = blk.q + r0 * d;
    dgemm_rm(false, true, rows, lk, d, q, d, blk.k, d, S.data(), lk);
    const RefVec abs_q = abs_copy(q, rows * d);
    dgemm_rm(false, true, rows, lk, d, abs_q.data(), d, abs_k.data(), d, E.data(), lk);
    // The scores' floor in u_fp32 units, folded into E (e_ij = |scale|·E_ij·root_d below):
    // E_ij += (wa·s(q_i)·|k_j| + wb·|q_i|·s(k_j)) / root_d.
    RefVec floor_q = eta > 0.0 ? floor_errors(q, rows * d, eta) : RefVec{};
    for (auto& x : floor_q) x *= wa;
    if (!floor_q.empty() || !floor_k.empty()) {
      std::vector<double> F(static_cast<std::size_t>(rows * lk), 0.0);
      if (!floor_q.empty())
        dgemm_rm(false, true, rows, lk, d, floor_q.data(), d, abs_k.data(), d, F.data(), lk, 1.0);
      if (!floor_k.empty())
        dgemm_rm(false, true, rows, lk, d, abs_q.data(), d, floor_k.data(), d, F.data(), lk, 1.0);
      for (std::int64_t x = 0; x < rows * lk; ++x)
        if (std::isfinite(F[x])) E[x] += F[x] / root_d;
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t n = attended_keys(r0 + i, lk, blk.causal);
      double* s = S.data() + i * lk;
      double* p = P.data() + i * lk;
      double* w = W.data() + i * lk;
      const double* e = E.data() + i * lk;
      double m = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (std::int64_t j = 0; j < n; ++j) {
        s[j] *= blk.scale;
        nan |= std::isnan(s[j]);
        m = std::max(m, s[j]);
      }
      if (nan) m = std::numeric_limits<double>::quiet_NaN();
      if (blk.alt && !nan && n > 0 && m == -std::numeric_limits<double>::infinity()) {
        // Every attended score is -Inf: softmax is 0/0 and the row NaN here, while PyTorch's SDPA
        // backends (the math backend's safe softmax, the efficient and flash kernels) and
        // FlashAttention return zeros for such a row. Either is accepted, column by column where
        // the attended values are finite (0 * Inf is NaN in both).
        for (std::int64_t c = 0; c < d; ++c) {
          bool finite_col = true;
          for (std::int64_t j = 0; j < n && finite_col; ++j) finite_col = std::isfinite(blk.v[j * d + c]);
          if (finite_col) blk.alt[(r0 + i) * d + c] |= k_alt_zero;
        }
      }
      double sum = 0;
      for (std::int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - m);
      double e_bar = 0, e_max = 0, spread_max = 0, dot_max = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        p[j] = std::exp(s[j] - m) / sum;
        dot_max = std::max(dot_max, e[j]);
        const double e_j = abs_scale * e[j] * root_d;
        w[j] = p[j] * (std::fabs(s[j] - m) + e_j);
        e_bar += p[j] * e_j;
        e_max = std::max(e_max, e_j);
        spread_max = std::max(spread_max, std::fabs(s[j] - m) + e_j);
      }
      unresolved[i] = k_u_fp32 * spread_max > 2.0;
      e_max_row[i] = e_max;
      dot_max_row[i] = dot_max;
      std::fill(p + n, p + lk, 0.0);
      std::fill(w + n, w + lk, 0.0);
      if (flush) {
        double* pin = P_in.data() + i * lk;
        for (std::int64_t j = 0; j < lk; ++j)
          pin[j] = j < n && p[j] < blk.p_min_normal ? p[j] + blk.p_flush_weight : p[j];
      }
      tail[i] = 2.0 * sqrt_len(n) + blk.policy_weight + e_bar;
      if (blk.alt && !v_finite)
        for (std::int64_t j = 0; j < n; ++j)
          if (p[j] < p_vanish)
            for (std::int64_t c = 0; c < d; ++c)
              if (!std::isfinite(blk.v[j * d + c])) blk.alt[(r0 + i) * d + c] = k_alt_any_nonfinite;
      if (blk.alt && n < lk) {
        // Masked keys take no part here; the math formulation (softmax(QKᵀ + mask)·V, SDPA's math
        // backend, a plain composition) gives NaN where one does: a masked score of +Inf or NaN
        // plus the -Inf mask makes the whole row NaN, and a masked non-finite value times its
        // probability 0 makes that column NaN.
        // A finite masked score overflows too where its fp32 dot product may: the products'
        // magnitudes summed, unscaled (kernels that scale after the dot) or scaled (q·sqrt(scale)
        // against k·sqrt(scale), SDPA's math backend), within a factor 2 of fp32's largest value
        // (the math backend's causal q = [2e19, 1], k = [1, 2e19]: a masked score of 4e38 is +Inf
        // in fp32, and the row NaN, where this reference is finite).
        bool row_nan = false;
        for (std::int64_t j = n; j < lk && !row_nan; ++j)
          row_nan = std::isnan(s[j] * blk.scale) ||
                    s[j] * blk.scale == std::numeric_limits<double>::infinity() ||
                    (std::isfinite(e[j]) && std::max(1.0, abs_scale) * e[j] >= k_fp32_max / 2);
        for (std::int64_t c = 0; c < d; ++c)
          if (row_nan || last_nonfinite_v[c] >= n) blk.alt[(r0 + i) * d + c] |= k_alt_nan;
      }
    }
    double* out = blk.out + r0 * d;
    double* c_in = blk.c_in + r0 * d;
    double* c_acc = blk.c_acc + r0 * d;
    if (!row_wise_pv) {
      dgemm_rm(false, false, rows, d, lk, P.data(), lk, blk.v, d, out, d);
      dgemm_rm(false, false, rows, d, lk, flush ? P_in.data() : P.data(), lk, abs_v.data(), d,
               c_in, d);
      dgemm_rm(false, false, rows, d, lk, W.data(), lk, abs_v.data(), d, c_acc, d);
    } else {
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t n = attended_keys(r0 + i, lk, blk.causal);
        std::fill(out + i * d, out + (i + 1) * d, 0.0);
        std::fill(c_in + i * d, c_in + (i + 1) * d, 0.0);
        std::fill(c_acc + i * d, c_acc + (i + 1) * d, 0.0);
        for (std::int64_t j = 0; j < n; ++j) {
          const double pj = P[i * lk + j], wj = W[i * lk + j];
          const double pin = flush ? P_in[i * lk + j] : pj;
          for (std::int64_t c = 0; c < d; ++c) {
            out[i * d + c] += pj * blk.v[j * d + c];
            c_in[i * d + c] += pin * abs_v[j * d + c];
            c_acc[i * d + c] += wj * abs_v[j * d + c];
          }
        }
      }
    }
    if (eta > 0.0) {
      // P·V's floor: wa·s(P)·|v| + wb·P·s(v), masked keys' P being 0 (and so s(P)).
      std::vector<double> SP(static_cast<std::size_t>(rows * lk), 0.0);
      bool any_p = false;
      for (std::int64_t x = 0; x < rows * lk; ++x)
        if ((SP[x] = wa * floor_error(P[x], eta)) > 0.0) any_p = true;
      if (any_p || !floor_v.empty()) {
        if (finite_abs_v.empty()) {
          finite_abs_v = abs_v;
          for (auto& a : finite_abs_v) a = std::isfinite(a) ? a : 0.0;
        }
        std::vector<double> F(static_cast<std::size_t>(rows * d), 0.0);
        if (any_p) dgemm_rm(false, false, rows, d, lk, SP.data(), lk, finite_abs_v.data(), d, F.data(), d, 1.0);
        if (!floor_v.empty()) dgemm_rm(false, false, rows, d, lk, P.data(), lk, floor_v.data(), d, F.data(), d, 1.0);
        for (std::int64_t x = 0; x < rows * d; ++x)
          if (std::isfinite(F[x])) c_acc[x] += F[x];
      }
    }
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t c = 0; c < d; ++c) {
        c_acc[i * d + c] += tail[i] * c_in[i * d + c];
        // Before the final rescale the fp32 accumulator holds Σ_j exp(s_ij − m)·v_jd with m the
        // running max, each weight at most 1: up to Σ_j |v_jd| (all keys: an upper bound).
        // The unscaled scores of kernels that scale after the dot may overflow where the scaled
        // ones do not.
        c_acc[i * d + c] = overflow_guard(c_acc[i * d + c], std::max(sum_abs_v[c], dot_max_row[i]));
      }
    for (std::int64_t i = 0; i < rows; ++i) {
      if (!unresolved[i]) continue;
      if (prefix_max_v.empty()) {
        prefix_max_v = abs_v;
        for (std::int64_t j = 1; j < lk; ++j)
          for (std::int64_t c = 0; c < d; ++c)
            prefix_max_v[j * d + c] =
                std::max(prefix_max_v[j * d + c], prefix_max_v[(j - 1) * d + c]);
      }
      const std::int64_t n = attended_keys(r0 + i, lk, blk.causal);
      if (n == 0) continue;
      const double* vmax = prefix_max_v.data() + (n - 1) * d;
      for (std::int64_t c = 0; c < d; ++c) c_acc[i * d + c] += vmax[c] / k_u_fp32 + e_max_row[i];
    }
  }
}

// ---- flash_attention_backward (attention_reference.hpp) ---------------------------------------

namespace {

// A condition term kept finite (a huge bound instead of Inf: Inf times a 0 of |Q| in a dgemm would
// be NaN) and non-negative where an input was non-finite (its element is judged by the
// alternatives then).
inline double bwd_cap(double c) {
  return std::isnan(c) ? 0.0 : std::min(c, 1e300);
}

RefVec bwd_abs_finite(const double* x, std::int64_t n) {
  RefVec a = abs_copy(x, n);
  for (auto& v : a) v = std::isfinite(v) ? v : 0.0;
  return a;
}

}  // namespace

void attention_backward_block_reference(const AttentionBackwardBlock& blk) {
  const std::int64_t lq = blk.lq, lk = blk.lk, d = blk.d;
  if (lq <= 0 || d <= 0) return;
  const double pw = blk.policy_weight, abs_scale = std::fabs(blk.scale);
  const double root_d = sqrt_len(d) + pw;
  const double kv_growth = sqrt_len(blk.kv_rows) + pw + 1.0;
  const RefVec abs_k = bwd_abs_finite(blk.k, lk * d), abs_v = bwd_abs_finite(blk.v, lk * d);
  const bool flush = blk.p_flush_weight > 0.0;
  const std::int64_t chunk =
      std::max<std::int64_t>(1, std::min(lq, (1 << 18) / std::max<std::int64_t>(lk, 1)));
  const auto buf = static_cast<std::size_t>(chunk * std::max<std::int64_t>(lk, 1));
  // S: scores, then P; E: |q||k|; G: dP, then scale·dS; A: |dO||v|; the rest condition matrices.
  std::vector<double> S(buf), E(buf), G(buf), A(buf), PW(buf), PIN(buf), CQ(buf), CK(buf), CIN(buf);
  std::vector<double> dq_c(static_cast<std::size_t>(chunk * d));
  double max_mid = 0.0;
  auto note = [&](double x) {
    if (std::isfinite(x)) max_mid = std::max(max_mid, std::fabs(x));
  };
  for (std::int64_t r0 = 0; r0 < lq; r0 += chunk) {
    const std::int64_t rows = std::min(chunk, lq - r0);
    const double* q = blk.q + r0 * d;
    const double* g = blk.dout + r0 * d;
    const RefVec abs_q = bwd_abs_finite(q, rows * d), abs_g = bwd_abs_finite(g, rows * d);
    // Entry (i, j) of each depends on row i and key j alone: no masked value leaks into them.
    dgemm_rm(false, true, rows, lk, d, q, d, blk.k, d, S.data(), lk);
    dgemm_rm(false, true, rows, lk, d, abs_q.data(), d, abs_k.data(), d, E.data(), lk);
    dgemm_rm(false, true, rows, lk, d, g, d, blk.v, d, G.data(), lk);
    dgemm_rm(false, true, rows, lk, d, abs_g.data(), d, abs_v.data(), d, A.data(), lk);
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t row = r0 + i, n = attended_keys(row, lk, blk.causal);
      double lse = blk.lse[row];
      // D and its condition; the saved out is known to u_in relative, or to half a subnormal
      // spacing below the input dtype's smallest normal (Dflush, in units of u_in).
      double D = 0.0, Dabs = 0.0, Dflush = 0.0, Dfwd = 0.0;
      for (std::int64_t c = 0; c < d; ++c) {
        const double o = blk.out[row * d + c], t = blk.dout[row * d + c] * o;
        D += t;
        Dabs += std::fabs(t);
        if (flush && std::fabs(o) < blk.p_min_normal) Dflush += std::fabs(blk.dout[row * d + c]) * blk.p_flush_weight;
        // The kernel's own forward's out (autograd's mode): P rounded before P·V (header).
        if (blk.out_c_in && std::isfinite(blk.out_c_in[row * d + c]))
          Dfwd += std::fabs(blk.dout[row * d + c]) * blk.out_c_in[row * d + c];
      }
      Dfwd = std::isfinite(Dfwd) ? Dfwd : 0.0;
      note(Dabs);
      double* s = S.data() + i * lk;
      double* e = E.data() + i * lk;
      double* gp = G.data() + i * lk;
      double* a = A.data() + i * lk;
      double e_bar = 0.0, w0_max = 0.0;
      // A score whose fp32 dot product may overflow (its products' magnitudes summed, times the
      // scale or scale·log2 e a kernel may fold into q, within a factor 2 of fp32's largest value)
      // may come out ±Inf or NaN in whatever order the kernel sums: a -Inf drops its key from the
      // softmax, and the normalized P of the row's other keys may then be anything in [0, 1]
      // (H200, master seed 7, boundary values: cuBLAS's scores dropped the key fp64 gives P = 1,
      // and autograd's grad_v gave dO = 3.4e38 to the key it gives 0). The forward accepts any
      // convex combination in such a row; here δP is at least 1 (1/u in units of u) for its keys.
      bool row_may_overflow = false;
      for (std::int64_t j = 0; j < n; ++j)
        row_may_overflow |= !(std::max(1.0, abs_scale * k_log2e) * e[j] < k_fp32_max / 2);
      for (std::int64_t j = 0; j < n; ++j) {
        note(std::max(1.0, abs_scale) * e[j]);
        note(a[j]);
        s[j] *= blk.scale;  // the score
        e[j] *= abs_scale * root_d;  // e_ij
        w0_max = std::max(w0_max, e[j] + 3.0 * std::fabs(s[j]) + 2.0 * std::fabs(lse));
      }
      if (!(k_u_fp32 * w0_max <= 2.0) && !std::isnan(lse)) {
        // Scores fp32 cannot resolve (header): the saved lse's own fp32 rounding (or overflow)
        // may then put exp(s - lse) anywhere. The probabilities of the scores themselves stand in
        // (lse recomputed in fp64); the bound below is huge and any non-finite result accepted.
        double m = k_neg_inf, l = 0.0;
        for (std::int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
        for (std::int64_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
        if (std::isfinite(m)) lse = m + std::log(l);
      }
      for (std::int64_t j = 0; j < n; ++j) e_bar += std::exp(s[j] - lse) * e[j];
      const double root_n = sqrt_len(n);
      double R = 0.0;
      for (std::int64_t j = 0; j < n; ++j) {
        const double arg = s[j] - lse, p = std::exp(arg);
        const double w = e[j] + e_bar + 3.0 * std::fabs(s[j]) + 2.0 * std::fabs(lse) + 2.0 * root_n + 2.0;
        // The kernel's P is exp(arg + δ) with |δ| <= u·w: off by at most P·expm1(u·w). Where the
        // exact P underflows fp64 that product is taken in the log domain, exp(arg + u·w): an
        // argument error past the gap lets a key fp64 gives P = 0 carry real probability (scores
        // of 1e10 that differ by 1,253 nats, 2,700 nats of fp32 error: CPU sweep, master seed 7).
        // Below fp32's smallest normal an fp32 P holds only 2^-150 absolute: 2^-126 in units of u.
        const double dp = bwd_cap(p > 0.0 ? p * std::expm1(k_u_fp32 * w) / k_u_fp32
                                          : std::exp(arg + k_u_fp32 * w) / k_u_fp32) +
                          (p < 0x1.0p-126 ? 0x1.0p-126 : 0.0) + (row_may_overflow ? 1.0 / k_u_fp32 : 0.0);
        // Past 2 nats of argument error fp32 cannot tell the probabilities apart, and its P may
        // overflow: a correct kernel may give non-finite gradients from this pair (Inf·0).
        if (k_u_fp32 * w > 2.0 && blk.unresolved_q) {
          blk.unresolved_q[row] = 1;
          if (blk.unresolved_k) blk.unresolved_k[j] = 1;
        }
        e[j] = dp;  // E now holds δP
        R += (dp + 2.0 * root_n * p) * a[j];
        s[j] = p;  // S now holds P
      }
      R = bwd_cap(R);
      for (std::int64_t j = 0; j < n; ++j) {
        const double p = s[j], dp = e[j];
        const double dpd = gp[j] - D;
        const double ds = p * dpd;
        note(gp[j]);
        note(ds);
        if (blk.in_max > 0.0 && std::fabs(ds) * (1.0 + 0x1.0p-8) >= blk.in_max / 2) {
          if (blk.ds_overflow_q) blk.ds_overflow_q[row] = 1;
          if (blk.ds_overflow_k) blk.ds_overflow_k[j] = 1;
        }
        const double abs_ds = std::fabs(ds);
        const double c_ds = bwd_cap(dp * std::fabs(dpd) +
                                    p * (root_d * a[j] + (root_d + 1.0) * Dabs + std::fabs(gp[j]) + std::fabs(D)) +
                                    p * R + abs_ds);
        const double in_ds = bwd_cap(p * (Dabs + Dflush + Dfwd) + abs_ds + (flush && abs_ds < blk.p_min_normal ? blk.p_flush_weight : 0.0));
        const std::size_t x = static_cast<std::size_t>(i * lk + j);
        CQ[x] = bwd_cap(abs_scale * (c_ds + (root_n + 1.0 + pw) * abs_ds));
        CK[x] = bwd_cap(abs_scale * (c_ds + kv_growth * abs_ds));
        CIN[x] = bwd_cap(abs_scale * in_ds);
        PW[x] = bwd_cap(dp + kv_growth * p);
        PIN[x] = bwd_cap(flush && p < blk.p_min_normal ? p + blk.p_flush_weight : p);
        gp[j] = blk.scale * ds;  // G now holds scale·dS
      }
      // Masked keys take no part here, but a kernel that computes a whole tile (or the whole score
      // matrix) and masks afterwards forms their fp32 products too (the forward's header): a masked
      // score within a factor 2 of fp32's largest value may be +Inf, and the additive -Inf mask
      // makes the row's P NaN (its grad_q, and every key's grad_k and grad_v); a masked dP = dO·v
      // that large may be Inf, and its P of 0 times it NaN in dS: the row's grad_q and, since
      // softmax's backward sums dP·P over the whole row (autograd through a masked softmax), every
      // key's grad_k. grad_v (P·dO) does not read dP. Seen on the H200 and here: boundary values,
      // Lq = 1, causal, dO = 1.15 against a masked v = 3.4e38 (evidence/gpu/backward.md, seed 5).
      for (std::int64_t j = n; j < lk; ++j) {
        if (blk.unresolved_q && std::isfinite(e[j]) && std::max(1.0, abs_scale) * e[j] >= k_fp32_max / 2) {
          blk.unresolved_q[row] = 1;
          if (blk.unresolved_k) std::fill(blk.unresolved_k, blk.unresolved_k + lk, std::uint8_t{1});
        }
        if (std::isfinite(a[j]) && a[j] >= k_fp32_max / 2) {
          if (blk.ds_overflow_q) blk.ds_overflow_q[row] = 1;
          if (blk.ds_overflow_k) std::fill(blk.ds_overflow_k, blk.ds_overflow_k + lk, std::uint8_t{1});
        }
      }
      for (std::int64_t j = n; j < lk; ++j) {
        const std::size_t x = static_cast<std::size_t>(i * lk + j);
        s[j] = gp[j] = CQ[x] = CK[x] = CIN[x] = PW[x] = PIN[x] = 0.0;
      }
    }
    double* dq = blk.dq + r0 * d;
    double* c_acc_dq = blk.c_acc_dq + r0 * d;
    double* c_in_dq = blk.c_in_dq + r0 * d;
    if (!blk.special) {
      dgemm_rm(true, false, lk, d, rows, S.data(), lk, g, d, blk.dv, d, 1.0);
      dgemm_rm(false, false, rows, d, lk, G.data(), lk, blk.k, d, dq, d);
      dgemm_rm(true, false, lk, d, rows, G.data(), lk, q, d, blk.dk, d, 1.0);
    } else {  // the attended pairs only
      std::fill(dq, dq + rows * d, 0.0);
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t n = attended_keys(r0 + i, lk, blk.causal);
        for (std::int64_t j = 0; j < n; ++j) {
          const double p = S[i * lk + j], ds = G[i * lk + j];
          for (std::int64_t c = 0; c < d; ++c) {
            blk.dv[j * d + c] += p * g[i * d + c];
            dq[i * d + c] += ds * blk.k[j * d + c];
            blk.dk[j * d + c] += ds * q[i * d + c];
          }
        }
      }
    }
    dgemm_rm(true, false, lk, d, rows, PW.data(), lk, abs_g.data(), d, blk.c_acc_dv, d, 1.0);
    dgemm_rm(true, false, lk, d, rows, PIN.data(), lk, abs_g.data(), d, blk.c_in_dv, d, 1.0);
    dgemm_rm(false, false, rows, d, lk, CQ.data(), lk, abs_k.data(), d, c_acc_dq, d);
    dgemm_rm(false, false, rows, d, lk, CIN.data(), lk, abs_k.data(), d, c_in_dq, d);
    dgemm_rm(true, false, lk, d, rows, CK.data(), lk, abs_q.data(), d, blk.c_acc_dk, d, 1.0);
    dgemm_rm(true, false, lk, d, rows, CIN.data(), lk, abs_q.data(), d, blk.c_in_dk, d, 1.0);
  }
  if (blk.max_intermediate) *blk.max_intermediate = std::max(*blk.max_intermediate, max_mid);
}

bool reaches_policy_overflow(const double* x, std::int64_t n, double threshold) {
  for (std::int64_t i = 0; i < n; ++i)
    if (std::fabs(x[i]) >= threshold) return true;
  return false;
}

void attention_policy_overflow(const AttentionBlock& blk, double threshold) {
  if (!blk.alt || !std::isfinite(threshold) || blk.lq <= 0 || blk.d <= 0) return;
  const std::int64_t lk = blk.lk, d = blk.d;
  const bool any_key = reaches_policy_overflow(blk.k, lk * d, threshold);
  std::vector<char> col(static_cast<std::size_t>(d), 0);
  for (std::int64_t j = 0; j < lk; ++j)
    for (std::int64_t c = 0; c < d; ++c) col[c] |= std::fabs(blk.v[j * d + c]) >= threshold;
  // q pre-scaled (by scale, or by scale·log2(e) for exp2): the operand may be larger than q.
  const double q_threshold = threshold / std::max(1.0, std::fabs(blk.scale) * k_log2e);
  // A score that became -Inf drops its key instead (q_id·Inf < 0): the row is then the softmax
  // over the other keys, a finite convex combination of the values, which c_acc admits as an
  // unresolved row's (max_j |v_jd|/u_fp32 beside the NaN).
  std::vector<double> vmax(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t j = 0; j < lk; ++j)
    for (std::int64_t c = 0; c < d; ++c)
      if (std::isfinite(blk.v[j * d + c])) vmax[c] = std::max(vmax[c], std::fabs(blk.v[j * d + c]));
  for (std::int64_t i = 0; i < blk.lq; ++i) {
    const bool row = any_key || reaches_policy_overflow(blk.q + i * d, d, q_threshold);
    for (std::int64_t c = 0; c < d; ++c) {
      if (row || col[c]) blk.alt[i * d + c] |= k_alt_any_nonfinite;
      if (row && blk.c_acc) blk.c_acc[i * d + c] += vmax[c] / k_u_fp32;
    }
  }
}

}  // namespace gpuemu::ops
