// matmul [a[M,K], b[K,N]], bmm [a[B,M,K], b[B,K,N]] and linear [x[...,K], weight[N,K], bias[N]]
// (and matmul_backward, linear_backward below):
// fp64 references through OpenBLAS with the dot-product condition term, fp32-tiled controls (K
// tiles of 32 / 64, one fp32 chain, split-K, linear's unfused bias add) and known-buggy kernels.
//
// Error model (docs/error-model.md): c_acc = (|a|·|b|)·sqrt(K) — an fp32 sum of K products is off
// by at most about u_fp32·Σ|a_k b_k| per step; summed over K steps with random-sign rounding
// errors it grows like sqrt(K) when the partial sums grow linearly (all-positive products), and it
// is smaller when they cancel. linear adds |bias| (an fp32 add) to c_acc and, with a bias, c_in =
// |x·Wᵀ|: PyTorch's unfused path rounds the product to the input dtype before adding the bias.
// Under a precision policy (TF32 operands, ...) c_acc's factor sqrt(K) gains policy_weight().
#include "core/parallel.hpp"
#include "ops/gemm_blas.hpp"
#include "ops/gemm_emulation.hpp"
#include "ops/gpu_oracle.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpuemu::ops {
namespace {

using KernelOut = Result<std::vector<std::vector<double>>>;

Status check_rank(const RefArg& t, std::size_t rank, const char* what) {
  if (t.shape.size() != rank)
    return make_error(ErrorCode::shape_mismatch, std::string(what) + " must have rank " +
                                                     std::to_string(rank) + ", got " +
                                                     shape_to_string(t.shape));
  return {};
}

Error shape_error(const std::string& msg) {
  return make_error(ErrorCode::shape_mismatch, msg);
}

// The batched problem every op here reduces to: `batches` products of A[M,K]·B[K,N] (B stored
// [N,K] when b_transposed), plus an optional bias[N].
struct GemmProblem {
  std::int64_t batches = 1, M = 0, K = 0, N = 0;
  const double* a = nullptr;
  const double* b = nullptr;
  bool b_transposed = false;
  bool b_shared = false;  // one B for every batch (linear's weight)
  const double* bias = nullptr;
  Shape out_shape;
};

Result<GemmProblem> problem_of(const RefContext& ctx, std::string_view op) {
  GemmProblem p;
  if (op == "matmul") {
    const RefArg &a = ctx.input("a"), &b = ctx.input("b");
    GPUEMU_TRY_STATUS(check_rank(a, 2, "matmul's a"));
    GPUEMU_TRY_STATUS(check_rank(b, 2, "matmul's b"));
    if (a.shape[1] != b.shape[0])
      return shape_error("matmul: a " + shape_to_string(a.shape) + " and b " +
                         shape_to_string(b.shape) + " disagree on K");
    p.M = a.shape[0], p.K = a.shape[1], p.N = b.shape[1];
    p.a = a.data.data(), p.b = b.data.data();
    p.out_shape = {p.M, p.N};
  } else if (op == "bmm") {
    const RefArg &a = ctx.input("a"), &b = ctx.input("b");
    GPUEMU_TRY_STATUS(check_rank(a, 3, "bmm's a"));
    GPUEMU_TRY_STATUS(check_rank(b, 3, "bmm's b"));
    if (a.shape[0] != b.shape[0] || a.shape[2] != b.shape[1])
      return shape_error("bmm: a " + shape_to_string(a.shape) + " and b " +
                         shape_to_string(b.shape) + " disagree on B or K");
    p.batches = a.shape[0], p.M = a.shape[1], p.K = a.shape[2], p.N = b.shape[2];
    p.a = a.data.data(), p.b = b.data.data();
    p.out_shape = {p.batches, p.M, p.N};
  } else {  // linear: x[..., K] flattened to rows
    const RefArg &x = ctx.input("x"), &w = ctx.input("weight");
    GPUEMU_TRY_STATUS(check_rank(w, 2, "linear's weight"));
    if (x.shape.empty() || x.shape.back() != w.shape[1])
      return shape_error("linear: x " + shape_to_string(x.shape) + " and weight " +
                         shape_to_string(w.shape) + " disagree on K");
    p.K = w.shape[1], p.N = w.shape[0];
    p.M = p.K > 0 ? x.numel() / p.K : 0;
    if (p.K == 0) {
      p.M = 1;
      for (std::size_t i = 0; i + 1 < x.shape.size(); ++i) p.M *= x.shape[i];
    }
    p.a = x.data.data(), p.b = w.data.data();
    p.b_transposed = true, p.b_shared = true;
    p.out_shape = x.shape;
    p.out_shape.back() = p.N;
    if (ctx.has_input("bias")) {
      const RefArg& bias = ctx.input("bias");
      if (bias.shape != Shape{p.N})
        return shape_error("linear: bias " + shape_to_string(bias.shape) + " must be [" +
                           std::to_string(p.N) + "]");
      p.bias = bias.data.data();
    }
  }
  return p;
}

const double* b_of(const GemmProblem& p, std::int64_t batch) {
  return p.b_shared ? p.b : p.b + batch * p.K * p.N;
}

// Under a precision policy whose operand rounding overflows (RefContext::operand_overflow: an fp32
// operand of 3.40199e38 or more becomes Inf in TF32), every output whose row of a or column of b
// holds such an operand may be Inf or NaN (Inf times the other operand, Inf - Inf in the sum, Inf
// times a zero): alt_nonfinite for those, empty when no operand reaches the threshold.
std::vector<std::uint8_t> policy_overflow(const RefContext& ctx, const GemmProblem& p) {
  const double thr = ctx.operand_overflow;
  if (!std::isfinite(thr)) return {};
  const auto big = [thr](double v) { return std::fabs(v) >= thr; };
  std::vector<std::uint8_t> alt;
  for (std::int64_t t = 0; t < p.batches; ++t) {
    std::vector<char> row(static_cast<std::size_t>(p.M)), col(static_cast<std::size_t>(p.N));
    bool any = false;
    const double* a = p.a + t * p.M * p.K;
    const double* b = b_of(p, t);
    for (std::int64_t i = 0; i < p.M; ++i)
      for (std::int64_t k = 0; k < p.K; ++k)
        if (big(a[i * p.K + k])) row[i] = any = true;
    for (std::int64_t k = 0; k < p.K; ++k)
      for (std::int64_t j = 0; j < p.N; ++j)
        if (big(p.b_transposed ? b[j * p.K + k] : b[k * p.N + j])) col[j] = any = true;
    if (!any) continue;
    if (alt.empty()) alt.assign(static_cast<std::size_t>(p.batches * p.M * p.N), 0);
    for (std::int64_t i = 0; i < p.M; ++i)
      for (std::int64_t j = 0; j < p.N; ++j)
        if (row[i] || col[j]) alt[(t * p.M + i) * p.N + j] = k_alt_any_nonfinite;
  }
  return alt;
}

// c_acc = |a|·|b| times each output's growth of its fp32 accumulation (plus a policy's weight):
// √K for products whose roundings spread, more where they correlate. A dot product whose products
// are near-equal (a row of a and a column of b both constant along K: expanded inputs) is a running
// sum over equal terms, whose roundings add one-signed: SumGrowth's G(K) = √K + (K² − k*²)/(2K),
// k* = spread/(32·u·mean|t|) (docs/error-model.md, "Correlated rounding"; torch 1.13's fp32 GEMV
// with a and b expanded, K = 193, erred by 2.98 of the √K envelope). The products' spread
// max|t| − min|t| is bounded from below in O(1) an output from each row's and column's extremes
// (t at the row's largest |a| minus t at its smallest, and the same by columns), so G is never
// below the one the exact spread gives, and rows of varied values keep √K. One batch's outputs
// (acc, [M, N]); the GPU oracle's gemm_abs computes the same on the device.
void scale_by_growth(const GemmProblem& p, std::int64_t t, double* acc, double weight) {
  const double root_k = sqrt_len(p.K);
  if (p.K <= 1) {
    for (std::int64_t e = 0; e < p.M * p.N; ++e) acc[e] *= root_k + weight;
    return;
  }
  struct Extremes {
    double lo = std::numeric_limits<double>::infinity(), hi = -1.0;
    std::int64_t at_lo = 0, at_hi = 0;
    void add(double v, std::int64_t k) {
      if (v < lo) lo = v, at_lo = k;
      if (v > hi) hi = v, at_hi = k;
    }
  };
  const double n = static_cast<double>(p.K);
  std::vector<Extremes> rows(static_cast<std::size_t>(p.M)), cols(static_cast<std::size_t>(p.N));
  const double* a = p.a + t * p.M * p.K;
  const double* b = b_of(p, t);
  const auto b_at = [&](std::int64_t k, std::int64_t j) { return std::fabs(p.b_transposed ? b[j * p.K + k] : b[k * p.N + j]); };
  // Rows, columns and outputs in parallel; each scans its k in order, as one thread would, so
  // the extremes (first occurrences on ties) and every output are the same bits.
  const std::int64_t grain = std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(p.K, 1));
  parallel_for(p.M, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      rows[i] = Extremes{};
      for (std::int64_t k = 0; k < p.K; ++k) rows[i].add(std::fabs(a[i * p.K + k]), k);
    }
  }, grain);
  parallel_for(p.N, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; ++j) cols[j] = Extremes{};
    for (std::int64_t k = 0; k < p.K; ++k)
      for (std::int64_t j = j0; j < j1; ++j) cols[j].add(b_at(k, j), k);
  }, grain);
  parallel_for(p.M, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const Extremes& r = rows[i];
      for (std::int64_t j = 0; j < p.N; ++j) {
        const Extremes& c = cols[j];
        const double by_row = r.hi * b_at(r.at_hi, j) - r.lo * b_at(r.at_lo, j);
        const double by_col = std::fabs(a[i * p.K + c.at_hi]) * c.hi - std::fabs(a[i * p.K + c.at_lo]) * c.lo;
        const double spread = std::max({0.0, by_row, by_col});
        double& x = acc[i * p.N + j];
        const double g = SumGrowth::growth(n, x / n, spread);
        x *= std::max(root_k, g) + weight;
      }
    }
  }, std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(p.N, 1)));
}

Result<std::vector<RefOutput>> reference(const RefContext& ctx, std::string_view op) {
  GPUEMU_TRY(GemmProblem p, problem_of(ctx, op));
  const std::int64_t mn = p.M * p.N;
  // Not zeroed: the dgemms of the batches write every element of both (beta = 0; K = 0 included).
  RefVec value = uninit_output(p.batches * mn);
  const std::int64_t ldb = p.b_transposed ? p.K : p.N;
  if (ctx.value_only) {  // one dgemm per batch, the bias added, no bounds
    for (std::int64_t t = 0; t < p.batches; ++t)
      dgemm_rm(false, p.b_transposed, p.M, p.N, p.K, p.a + t * p.M * p.K, p.K, b_of(p, t), ldb,
               value.data() + t * mn, p.N);
    if (p.bias)
      for (std::int64_t r = 0; r < p.batches * p.M; ++r)
        for (std::int64_t j = 0; j < p.N; ++j) value[r * p.N + j] += p.bias[j];
    return single_output(ctx.output_dtype(), p.out_shape, std::move(value), RefVec{}, RefVec{});
  }
  RefVec c_acc = uninit_output(p.batches * mn), c_in;
  const DType in_dtype = ctx.input(op == "linear" ? "x" : "a").dtype;
  RefVec abs_b;  // |b| lifted (lift_subnormal_magnitudes), built for the first batch the CPU computes
  const double weight = policy_weight(ctx);
  for (std::int64_t t = 0; t < p.batches; ++t) {
    const double* a = p.a + t * p.M * p.K;
    // The value and |a|·|b| times its growth from one copy of the operands on the GPU, where the
    // oracle runs there.
    if (gpu_oracle::gemm_abs(p.b_transposed, p.M, p.N, p.K, a, b_of(p, t), subnormal_lift(in_dtype),
                             weight, value.data() + t * mn, c_acc.data() + t * mn))
      continue;
    if (abs_b.empty()) {
      abs_b = abs_copy(p.b, (p.b_shared ? 1 : p.batches) * p.K * p.N);
      lift_subnormal_magnitudes(abs_b, in_dtype);
    }
    dgemm_rm(false, p.b_transposed, p.M, p.N, p.K, a, p.K, b_of(p, t), ldb, value.data() + t * mn,
             p.N);
    RefVec abs_a = abs_copy(a, p.M * p.K);
    lift_subnormal_magnitudes(abs_a, in_dtype);
    const double* abs_bt = abs_b.data() + (p.b_shared ? 0 : t * p.K * p.N);
    dgemm_rm(false, p.b_transposed, p.M, p.N, p.K, abs_a.data(), p.K, abs_bt, ldb,
             c_acc.data() + t * mn, p.N);
    scale_by_growth(p, t, c_acc.data() + t * mn, weight);
  }
  if (ctx.operand_floor > 0.0) {  // a policy's absolute error on subnormal operands (rare: a
    // pass over the operands, then work only for each subnormal one found)
    const double wa = floor_weight_a(ctx), wb = floor_weight_b(ctx);
    for (std::int64_t t = 0; t < p.batches; ++t) {
      const double* a = p.a + t * p.M * p.K;
      const double* b = b_of(p, t);
      const auto b_at = [&](std::int64_t k, std::int64_t j) { return p.b_transposed ? b[j * p.K + k] : b[k * p.N + j]; };
      double* acc = c_acc.data() + t * mn;
      for (std::int64_t i = 0; i < p.M; ++i)
        for (std::int64_t k = 0; k < p.K; ++k)
          if (const double s = subnormal_error(ctx, a[i * p.K + k]); s > 0.0)
            for (std::int64_t j = 0; j < p.N; ++j) acc[i * p.N + j] += wa * s * std::fabs(b_at(k, j));
      for (std::int64_t k = 0; k < p.K; ++k)
        for (std::int64_t j = 0; j < p.N; ++j)
          if (const double s = subnormal_error(ctx, b_at(k, j)); s > 0.0)
            for (std::int64_t i = 0; i < p.M; ++i) acc[i * p.N + j] += wb * std::fabs(a[i * p.K + k]) * s;
    }
  }
  if (p.bias) {
    c_in = uninit_output(static_cast<std::int64_t>(value.size()));  // written in full below
    for (std::int64_t r = 0; r < p.batches * p.M; ++r)
      for (std::int64_t j = 0; j < p.N; ++j) {
        const std::int64_t i = r * p.N + j;
        c_in[i] = std::fabs(value[i]);  // the product, rounded to the input dtype when unfused
        value[i] += p.bias[j];
        c_acc[i] += std::fabs(p.bias[j]);
      }
  }
  return single_output(ctx.output_dtype(), p.out_shape, std::move(value), std::move(c_acc),
                       std::move(c_in), policy_overflow(ctx, p));
}

// How an emulated kernel differs from a plain tiled one, beyond the K-loop configuration.
enum class Epilogue { fused_bias, unfused_bias, bias_per_tile, batch0_b };

KernelFn emulated(std::string op, GemmEmulation cfg, Epilogue epi = Epilogue::fused_bias) {
  return [op, cfg, epi](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(GemmProblem p, problem_of(ctx, op));
    GemmEmulation run = cfg;
    if (run.bug == GemmBug::low_precision_acc)  // the case's 16-bit dtype, bf16 for fp32 cases
      run.low_dtype = (ctx.case_dtype == DType::float16 || ctx.case_dtype == DType::bfloat16)
                          ? ctx.case_dtype
                          : DType::bfloat16;
    const DType out_dtype = ctx.output_dtype();
    std::vector<double> out;
    out.reserve(static_cast<std::size_t>(p.batches * p.M * p.N));
    for (std::int64_t t = 0; t < p.batches; ++t) {
      const std::int64_t tb = epi == Epilogue::batch0_b ? 0 : t;
      const std::vector<float> a = to_f32(p.a + t * p.M * p.K, p.M * p.K);
      const std::vector<float> b =
          p.b_transposed ? transpose_to_f32(b_of(p, tb), p.N, p.K) : to_f32(b_of(p, tb), p.K * p.N);
      std::vector<float> acc = emulate_gemm(a.data(), b.data(), p.M, p.K, p.N, run);
      const std::int64_t bk = run.block_k > 0 ? run.block_k : std::max<std::int64_t>(p.K, 1);
      const float tiles = static_cast<float>(std::max<std::int64_t>(1, (p.K + bk - 1) / bk));
      for (std::int64_t i = 0; i < p.M; ++i)
        for (std::int64_t j = 0; j < p.N; ++j) {
          float v = acc[i * p.N + j];
          if (p.bias) {
            const float bias = f32(p.bias[j]);
            if (epi == Epilogue::unfused_bias)  // matmul stored in the dtype, then add_(bias)
              v = f32(round_to(out_dtype, v)) + bias;
            else if (epi == Epilogue::bias_per_tile)
              v += tiles * bias;
            else
              v += bias;
          }
          out.push_back(round_to(out_dtype, static_cast<double>(v)));
        }
    }
    return std::vector<std::vector<double>>{std::move(out)};
  };
}

GemmEmulation tiled(std::int64_t block_k, std::int64_t split_k = 1, GemmBug bug = GemmBug::none) {
  GemmEmulation cfg;
  cfg.block_k = block_k;
  cfg.split_k = split_k;
  cfg.bug = bug;
  return cfg;
}

BuiltinOp make_op(const std::string& name) {
  BuiltinOp op;
  op.name = name;
  op.reference = [name](const RefContext& ctx) { return reference(ctx, name); };
  op.controls = {
      {"fp32_tiled_k32", "fp32 accumulator over BLOCK_K=32 tiles (each tile's dot summed from 0)",
       emulated(name, tiled(32))},
      {"fp32_tiled_k64", "fp32 accumulator over BLOCK_K=64 tiles", emulated(name, tiled(64))},
      {"fp32_sequential", "one fp32 chain over all of K (a SIMT kernel without tiles)",
       emulated(name, tiled(0))},
      {"fp32_split_k4", "split-K: four K chunks of BLOCK_K=64 tiles, fp32 partials summed last",
       emulated(name, tiled(64, 4))},
  };
  op.buggy = {
      {"acc_overwrite",
       "BLOCK_K=32 with `acc = dot(a, b)` instead of `acc +=`: only the last K "
       "tile survives (K > 32)",
       emulated(name, tiled(32, 1, GemmBug::acc_overwrite))},
      {"low_precision_acc",
       "the accumulator is a 16-bit variable (the case dtype, bf16 for fp32 "
       "cases) rounded after every product",
       emulated(name, tiled(32, 1, GemmBug::low_precision_acc))},
      {"dropped_tail_k",
       "BLOCK_K=32 loop over K // BLOCK_K tiles: the partial last tile is lost "
       "(K % 32 != 0)",
       emulated(name, tiled(32, 1, GemmBug::dropped_tail_k))},
  };
  if (name == "linear")
    op.controls.push_back({"unfused_bias",
                           "fp32 BLOCK_K=32 product stored in the dtype, then "
                           "bias added (PyTorch's matmul + add_ path)",
                           emulated(name, tiled(32), Epilogue::unfused_bias)});
  if (name == "linear")
    op.buggy.push_back({"bias_per_tile",
                        "bias added inside the K loop, once per BLOCK_K=32 tile "
                        "(K > 32, with a bias)",
                        emulated(name, tiled(32), Epilogue::bias_per_tile)});
  if (name == "bmm")
    op.buggy.push_back({"batch_offset_missing",
                        "b's pointer never advances by the batch stride: "
                        "every batch multiplies by b[0] (B > 1)",
                        emulated(name, tiled(32), Epilogue::batch0_b)});
  return op;
}

// ---- matmul_backward: grad_a = grad_out @ b^T and grad_b = a^T @ grad_out ----------------------
// Each gradient is a GEMM (a dot product over N for grad_a, over M for grad_b), judged by the
// forward matmul's reference and error model on the transposed operands: the same c_acc (|x|@|y|
// times max(sqrt(len), the correlated growth)), the same precision policies and tensor-core
// subnormal term. A kernel's backward GEMMs are ordinary GEMMs.

RefArg transposed(const RefArg& x) {
  RefArg t;
  t.dtype = x.dtype;
  const std::int64_t r = x.shape[0], c = x.shape[1];
  t.shape = {c, r};
  t.data.resize(x.data.size());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) t.data[static_cast<std::size_t>(j * r + i)] = x.data[static_cast<std::size_t>(i * c + j)];
  return t;
}

// a @ b as a matmul context of a backward case `ctx`: its dtype, its precision policy's fields and
// value_only carried over; no schema, so the outputs are in the case dtype.
RefContext matmul_subproblem(const RefContext& ctx, RefArg a, RefArg b) {
  RefContext c;
  c.case_dtype = ctx.case_dtype;
  c.attrs = Json::object();
  c.operand_roundoff = ctx.operand_roundoff;
  c.operand_overflow = ctx.operand_overflow;
  c.operand_floor = ctx.operand_floor;
  c.value_only = ctx.value_only;
  c.inputs["a"] = std::move(a);
  c.inputs["b"] = std::move(b);
  return c;
}

// The two forward problems of a backward case: grad_out @ b^T and a^T @ grad_out, as matmul
// contexts.
Result<std::pair<RefContext, RefContext>> backward_problems(const RefContext& ctx) {
  const RefArg &g = ctx.input("grad_out"), &a = ctx.input("a"), &b = ctx.input("b");
  if (g.shape.size() != 2 || a.shape.size() != 2 || b.shape.size() != 2 || a.shape[1] != b.shape[0] ||
      g.shape[0] != a.shape[0] || g.shape[1] != b.shape[1])
    return shape_error("matmul_backward: grad_out " + shape_to_string(g.shape) + ", a " + shape_to_string(a.shape) +
                       " and b " + shape_to_string(b.shape) + " must be [M, N], [M, K] and [K, N]");
  return std::make_pair(matmul_subproblem(ctx, g, transposed(b)), matmul_subproblem(ctx, transposed(a), g));
}

Result<std::vector<RefOutput>> backward_reference(const RefContext& ctx) {
  GPUEMU_TRY(auto problems, backward_problems(ctx));
  GPUEMU_TRY(std::vector<RefOutput> ga, reference(problems.first, "matmul"));
  GPUEMU_TRY(std::vector<RefOutput> gb, reference(problems.second, "matmul"));
  std::vector<RefOutput> out = {std::move(ga.front()), std::move(gb.front())};
  out[0].name = "grad_a";
  out[1].name = "grad_b";
  out[0].dtype = ctx.output_dtype(0);
  out[1].dtype = ctx.output_dtype(1);
  return out;
}

// Both gradients through one emulated forward kernel; `wrong_b` reads a's storage as a^T without
// transposing it (grad_b = reshape(a, [K, M]) @ grad_out: a stride mix-up).
KernelFn backward_emulated(GemmEmulation cfg, bool wrong_b = false) {
  const KernelFn fwd = emulated("matmul", cfg);
  return [fwd, wrong_b](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(auto problems, backward_problems(ctx));
    if (wrong_b) {
      RefArg& at = problems.second.inputs["a"];
      const RefArg& a = ctx.input("a");
      at.data = a.data;  // [M, K] storage read as [K, M]
    }
    GPUEMU_TRY(auto ga, fwd(problems.first));
    GPUEMU_TRY(auto gb, fwd(problems.second));
    const DType da = ctx.output_dtype(0), db = ctx.output_dtype(1);
    return std::vector<std::vector<double>>{round_all(da, std::move(ga.front())), round_all(db, std::move(gb.front()))};
  };
}

BuiltinOp make_backward_op() {
  BuiltinOp op;
  op.name = "matmul_backward";
  op.reference = backward_reference;
  op.controls = {
      {"fp32_tiled_k32", "both gradients with an fp32 accumulator over BLOCK_K=32 tiles", backward_emulated(tiled(32))},
      {"fp32_sequential", "both gradients as one fp32 chain over the reduced dim", backward_emulated(tiled(0))},
      {"fp32_split_k4", "split-K: four chunks of BLOCK_K=64 tiles, fp32 partials summed last",
       backward_emulated(tiled(64, 4))},
  };
  op.buggy = {
      {"acc_overwrite", "`acc = dot(...)` instead of `acc +=` in both backward GEMMs (reduced dim > 32)",
       backward_emulated(tiled(32, 1, GemmBug::acc_overwrite))},
      {"low_precision_acc", "the backward GEMMs' accumulator a 16-bit variable (the case dtype, bf16 for fp32)",
       backward_emulated(tiled(32, 1, GemmBug::low_precision_acc))},
      {"dropped_tail_k", "the partial last tile of the reduced dim lost (its length % 32 != 0)",
       backward_emulated(tiled(32, 1, GemmBug::dropped_tail_k))},
      {"untransposed_a", "grad_b from a's storage read as [K, M] without transposing it",
       backward_emulated(tiled(32), true)},
  };
  return op;
}

// ---- linear_backward: grad_x = grad_out @ W, grad_weight = grad_out^T @ x, grad_bias = sum_rows g --
// The two GEMMs judged as matmul_backward's are (matmul's reference on those operands); grad_bias,
// a column reduction of grad_out over the M rows, by sum's own reference and error model.

Result<std::pair<RefContext, RefContext>> linear_backward_problems(const RefContext& ctx) {
  const RefArg &g = ctx.input("grad_out"), &x = ctx.input("x"), &w = ctx.input("weight");
  if (g.shape.size() != 2 || x.shape.size() != 2 || w.shape.size() != 2 || g.shape[0] != x.shape[0] ||
      g.shape[1] != w.shape[0] || x.shape[1] != w.shape[1])
    return shape_error("linear_backward: grad_out " + shape_to_string(g.shape) + ", x " + shape_to_string(x.shape) +
                       " and weight " + shape_to_string(w.shape) + " must be [M, N], [M, K] and [N, K]");
  return std::make_pair(matmul_subproblem(ctx, g, w), matmul_subproblem(ctx, transposed(g), x));
}

Result<std::vector<RefOutput>> linear_backward_reference(const RefContext& ctx) {
  GPUEMU_TRY(auto problems, linear_backward_problems(ctx));
  GPUEMU_TRY(std::vector<RefOutput> gx, reference(problems.first, "matmul"));
  GPUEMU_TRY(std::vector<RefOutput> gw, reference(problems.second, "matmul"));
  const BuiltinOp* sum = BuiltinRegistry::instance().find("sum");
  if (!sum) return make_error(ErrorCode::internal, "linear_backward: no built-in sum");
  RefContext sc;
  sc.case_dtype = ctx.case_dtype;
  sc.attrs = Json{{"dim", 0}, {"keepdim", false}};
  sc.value_only = ctx.value_only;
  sc.inputs["x"] = ctx.input("grad_out");
  GPUEMU_TRY(std::vector<RefOutput> gb, sum->reference(sc));
  std::vector<RefOutput> out = {std::move(gx.front()), std::move(gw.front()), std::move(gb.front())};
  const char* names[] = {"grad_x", "grad_weight", "grad_bias"};
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].name = names[i];
    out[i].dtype = ctx.output_dtype(static_cast<int>(i));
  }
  return out;
}

// How an emulated grad_bias sums grad_out's rows: fp32 partials over blocks of `block` rows (0:
// one chain over all rows), added to an fp32 total; bugs: the partial last block dropped, or the
// accumulator a 16-bit variable (the case dtype, bf16 for fp32 cases) rounded after every add.
enum class BiasBug { none, tail_dropped, lowp_acc };

std::vector<double> bias_sum(const RefContext& ctx, std::int64_t block, BiasBug bug) {
  const RefArg& g = ctx.input("grad_out");
  const std::int64_t M = g.shape[0], N = g.shape[1];
  const std::int64_t bm = block > 0 ? block : std::max<std::int64_t>(M, 1);
  const std::int64_t rows = bug == BiasBug::tail_dropped ? M / bm * bm : M;
  const DType low = ctx.case_dtype == DType::float16 || ctx.case_dtype == DType::bfloat16 ? ctx.case_dtype : DType::bfloat16;
  std::vector<double> out(static_cast<std::size_t>(N));
  for (std::int64_t j = 0; j < N; ++j) {
    float total = 0.0f;
    for (std::int64_t b = 0; b < rows; b += bm) {
      float part = 0.0f;
      for (std::int64_t i = b; i < std::min(rows, b + bm); ++i) {
        part += f32(g.data[static_cast<std::size_t>(i * N + j)]);
        if (bug == BiasBug::lowp_acc) part = store_as(low, part);
      }
      total += part;
      if (bug == BiasBug::lowp_acc) total = store_as(low, total);
    }
    out[static_cast<std::size_t>(j)] = static_cast<double>(total);
  }
  return round_all(ctx.output_dtype(2), std::move(out));
}

KernelFn linear_backward_emulated(GemmEmulation cfg, std::int64_t bias_block, BiasBug bias_bug = BiasBug::none) {
  const KernelFn fwd = emulated("matmul", cfg);
  return [fwd, bias_block, bias_bug](const RefContext& ctx) -> KernelOut {
    GPUEMU_TRY(auto problems, linear_backward_problems(ctx));
    GPUEMU_TRY(auto gx, fwd(problems.first));
    GPUEMU_TRY(auto gw, fwd(problems.second));
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(0), std::move(gx.front())),
                                            round_all(ctx.output_dtype(1), std::move(gw.front())),
                                            bias_sum(ctx, bias_block, bias_bug)};
  };
}

BuiltinOp make_linear_backward_op() {
  BuiltinOp op;
  op.name = "linear_backward";
  op.reference = linear_backward_reference;
  op.controls = {
      {"fp32_tiled_k32", "both GEMMs over BLOCK_K=32 tiles in fp32; grad_bias in fp32 partials of 64 rows",
       linear_backward_emulated(tiled(32), 64)},
      {"fp32_sequential", "both GEMMs and grad_bias as one fp32 chain over the reduced dim",
       linear_backward_emulated(tiled(0), 0)},
      {"fp32_split_k4", "split-K GEMMs (four chunks of BLOCK_K=64 tiles); grad_bias in partials of 128 rows",
       linear_backward_emulated(tiled(64, 4), 128)},
  };
  op.buggy = {
      {"bias_tail_dropped", "grad_bias over M // 64 blocks of 64 rows: the partial last block lost (M % 64 != 0)",
       linear_backward_emulated(tiled(32), 64, BiasBug::tail_dropped)},
      {"bias_lowp_acc", "grad_bias accumulated in a 16-bit variable (the case dtype, bf16 for fp32)",
       linear_backward_emulated(tiled(32), 64, BiasBug::lowp_acc)},
      {"acc_overwrite", "`acc = dot(...)` instead of `acc +=` in both GEMMs (reduced dim > 32)",
       linear_backward_emulated(tiled(32, 1, GemmBug::acc_overwrite), 64)},
      {"dropped_tail_k", "the partial last tile of the GEMMs' reduced dim lost (its length % 32 != 0)",
       linear_backward_emulated(tiled(32, 1, GemmBug::dropped_tail_k), 64)},
  };
  return op;
}

}  // namespace

void register_gemm_ops(BuiltinRegistry& r) {
  r.add(make_op("matmul"));
  r.add(make_op("bmm"));
  r.add(make_op("linear"));
  r.add(make_backward_op());
  r.add(make_linear_backward_op());
}

}  // namespace gpuemu::ops
