// Elementwise ops: the unary activations and maths functions (relu ... rsqrt), the broadcasting
// binaries add and mul, and the gated swiglu / geglu. Each has an fp64 reference with its
// condition term, correct fp32 "opmath" controls (PyTorch's formulas, and the fast exp2-based
// forms Triton/CUDA fast-math kernels use), and known-buggy kernels.
//
// Error model (docs/error-model.md): per element c_acc = |x f'(x)| + |f(x)|, the magnitude an
// fp32 evaluation of f perturbs (argument rounding amplified by the derivative, plus the result's
// own rounding), plus, where PyTorch's own formula cancels, the magnitude of the cancelling
// intermediate: gelu's 0.5x(1 + erf) / 0.5x(1 + tanh) lose u_fp32 * 0.5|x| for x < 0, and elu's
// alpha*(exp(x) - 1) (PyTorch's CPU kernel) loses u_fp32 * alpha*exp(x). Gated ops multiply the
// activation's term by |up| and add c_in = |f(gate) * up|: unfused kernels (F.silu(gate) * up) round
// the activation to the input dtype before the product; both add |up| times the smallest normal of
// the dtype the activation lives in (its absolute resolution near underflow).
#include "core/parallel.hpp"
#include "ops/lowp_emu.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <cmath>

namespace gpuemu::ops {
namespace {

constexpr double k_sqrt1_2 = 0.70710678118654752440;
constexpr double k_sqrt_2_over_pi = 0.79788456080286535588;
constexpr double k_inv_sqrt_2pi = 0.39894228040143267794;
constexpr double k_gelu_cubic = 0.044715;
constexpr float k_log2e_f = 1.44269504f;
constexpr float k_ln2_f = 0.693147181f;
// Elementwise kernels process BLOCK elements per program; the tail bug launches numel / BLOCK.
constexpr std::int64_t k_ew_block = 1024;

// The attrs of the elementwise family, read once per call.
struct EwParams {
  double slope = 0.01, alpha = 1.0, beta = 1.0, threshold = 20.0;
  bool tanh_approx = false;
};

double attr_or(const RefContext& ctx, const char* name, double fallback) {
  auto it = ctx.attrs.find(name);
  return it != ctx.attrs.end() && it->is_number() ? it->get<double>() : fallback;
}

EwParams read_params(const RefContext& ctx) {
  EwParams p;
  p.slope = attr_or(ctx, "negative_slope", p.slope);
  p.alpha = attr_or(ctx, "alpha", p.alpha);
  p.beta = attr_or(ctx, "beta", p.beta);
  p.threshold = attr_or(ctx, "threshold", p.threshold);
  auto it = ctx.attrs.find("approximate");
  if (it != ctx.attrs.end() && !it->is_null()) {
    const std::string a = it->is_string() ? it->get<std::string>() : "";
    if (a != "none" && a != "tanh")
      throw GpuemuException(make_error(ErrorCode::invalid_argument,
                                       "approximate must be 'none' or 'tanh', got " + it->dump()));
    p.tanh_approx = a == "tanh";
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// fp64 references: value and c_acc (without the finiteness guard, applied by the driver).
struct RefPoint {
  double value, c_acc;
};
using RefScalar = RefPoint (*)(double, const EwParams&);

double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }

RefPoint gelu64(double x, bool tanh_approx) {
  double v = 0.0, d = 0.0;
  if (tanh_approx) {
    // 0.5x(1 + tanh(y)) == x * sigmoid(2y): no cancellation in double for x << 0.
    const double y = k_sqrt_2_over_pi * (x + k_gelu_cubic * x * x * x);
    const double s = sigmoid64(2.0 * y);
    v = x * s;
    d = s + x * 2.0 * s * (1.0 - s) * k_sqrt_2_over_pi * (1.0 + 3.0 * k_gelu_cubic * x * x);
  } else {
    const double phi_cdf = 0.5 * std::erfc(-x * k_sqrt1_2);
    v = x * phi_cdf;
    d = phi_cdf + x * k_inv_sqrt_2pi * std::exp(-0.5 * x * x);
  }
  return {v, std::fabs(x * d) + std::fabs(v) + (x < 0 ? 0.5 * std::fabs(x) : 0.0)};
}

// For x < -88.7 the fp32 formula's exp(-x) overflows and a correct kernel returns -0 while the
// result (down to -1e-43) is still a normal number: overflow_guard makes those elements
// indeterminate.
RefPoint silu64(double x) {
  const double s = sigmoid64(x);
  const double v = x / (1.0 + std::exp(-x));
  return {v, overflow_guard(std::fabs(x * s * (1.0 + x * (1.0 - s))) + std::fabs(v), std::exp(-x))};
}

RefPoint ref_relu(double x, const EwParams&) {
  const double v = x < 0 ? 0.0 : x;  // clamp_min(x, 0): NaN and -0 pass through
  return {v, 2.0 * std::fabs(v)};
}
RefPoint ref_leaky_relu(double x, const EwParams& p) {
  const double v = x > 0 ? x : x * p.slope;
  return {v, 2.0 * std::fabs(v)};
}
RefPoint ref_gelu(double x, const EwParams& p) { return gelu64(x, p.tanh_approx); }
RefPoint ref_silu(double x, const EwParams&) { return silu64(x); }
RefPoint ref_sigmoid(double x, const EwParams&) {
  const double s = sigmoid64(x);
  return {s, std::fabs(x) * s * (1.0 - s) + s};
}
RefPoint ref_tanh(double x, const EwParams&) {
  const double t = std::tanh(x);
  return {t, std::fabs(x) * (1.0 - t * t) + std::fabs(t)};
}
RefPoint ref_elu(double x, const EwParams& p) {
  if (x > 0) return {x, 2.0 * x};
  const double e = std::exp(x);
  const double v = p.alpha * std::expm1(x);
  return {v, std::fabs(x * p.alpha * e) + std::fabs(v) + std::fabs(p.alpha) * e};
}
RefPoint ref_softplus(double x, const EwParams& p) {
  if (x * p.beta > p.threshold) return {x, 2.0 * std::fabs(x)};
  const double v = std::log1p(std::exp(p.beta * x)) / p.beta;
  return {v, std::fabs(x) * sigmoid64(p.beta * x) + std::fabs(v)};
}
RefPoint ref_exp(double x, const EwParams&) {
  const double v = std::exp(x);
  return {v, (std::fabs(x) + 1.0) * v};
}
RefPoint ref_log(double x, const EwParams&) {
  const double v = std::log(x);
  return {v, 1.0 + std::fabs(v)};
}
RefPoint ref_sqrt(double x, const EwParams&) {
  const double v = std::sqrt(x);
  return {v, 1.5 * std::fabs(v)};
}
RefPoint ref_rsqrt(double x, const EwParams&) {
  const double v = 1.0 / std::sqrt(x);
  return {v, 1.5 * std::fabs(v)};
}

// ---------------------------------------------------------------------------------------------
// fp32 kernel bodies (inputs are the case dtype's values, exact in float).
using KernScalar = float (*)(float, const EwParams&);

float sigmoid_f(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float sigmoid_fast_f(float x) { return 1.0f / (1.0f + std::exp2(-x * k_log2e_f)); }
float gelu_erf_f(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.707106781f)); }
float gelu_tanh_f(float x, float cubic) {
  return 0.5f * x * (1.0f + std::tanh(0.797884561f * (x + cubic * x * x * x)));
}

float k_relu(float x, const EwParams&) { return x < 0 ? 0.0f : x; }
float k_relu_fmax(float x, const EwParams&) { return std::fmax(x, 0.0f); }
float k_leaky(float x, const EwParams& p) { return x > 0 ? x : x * f32(p.slope); }
float k_leaky_select(float x, const EwParams& p) { return x * (x > 0 ? 1.0f : f32(p.slope)); }
float k_leaky_wrong_slope(float x, const EwParams&) { return x > 0 ? x : x * 0.1f; }
float k_gelu(float x, const EwParams& p) {
  return p.tanh_approx ? gelu_tanh_f(x, 0.044715f) : gelu_erf_f(x);
}
float k_gelu_fast(float x, const EwParams& p) {
  if (p.tanh_approx) {
    // 0.5x(1 + tanh(y)) written as x * sigmoid(2y) with an exp2-based sigmoid (Triton kernels).
    const float y = 0.797884561f * (x + 0.044715f * x * x * x);
    return x * sigmoid_fast_f(2.0f * y);
  }
  return 0.5f * x * std::erfc(-x * 0.707106781f);
}
float k_gelu_const_0044(float x, const EwParams&) { return gelu_tanh_f(x, 0.044f); }
float k_gelu_sigmoid_approx(float x, const EwParams&) { return x * sigmoid_f(1.702f * x); }
float k_silu(float x, const EwParams&) { return x / (1.0f + std::exp(-x)); }
float k_silu_fast(float x, const EwParams&) { return x * sigmoid_fast_f(x); }
float k_silu_overflow(float x, const EwParams&) {
  const float e = std::exp(x);
  return x * e / (1.0f + e);
}
float k_sigmoid(float x, const EwParams&) { return sigmoid_f(x); }
float k_sigmoid_fast(float x, const EwParams&) { return sigmoid_fast_f(x); }
float k_sigmoid_overflow(float x, const EwParams&) {
  const float e = std::exp(x);
  return e / (1.0f + e);
}
float k_sigmoid_tanh_half(float x, const EwParams&) { return 0.5f * std::tanh(x) + 0.5f; }
float k_tanh(float x, const EwParams&) { return std::tanh(x); }
float k_tanh_expm1(float x, const EwParams&) {
  const float e = std::expm1(2.0f * std::clamp(x, -10.0f, 10.0f));
  return e / (e + 2.0f);
}
float k_tanh_overflow(float x, const EwParams&) {
  const float e = std::exp(2.0f * x);
  return (e - 1.0f) / (e + 1.0f);
}
float k_elu(float x, const EwParams& p) { return x > 0 ? x : f32(p.alpha) * (std::exp(x) - 1.0f); }
float k_elu_expm1(float x, const EwParams& p) { return x > 0 ? x : f32(p.alpha) * std::expm1(x); }
float k_elu_no_minus_one(float x, const EwParams& p) { return x > 0 ? x : f32(p.alpha) * std::exp(x); }
float k_softplus(float x, const EwParams& p) {
  const float bx = x * f32(p.beta);
  return bx > f32(p.threshold) ? x : std::log1p(std::exp(bx)) / f32(p.beta);
}
float k_softplus_stable(float x, const EwParams& p) {
  const float bx = x * f32(p.beta);
  if (bx > f32(p.threshold)) return x;
  return (std::max(bx, 0.0f) + std::log1p(std::exp(-std::fabs(bx)))) / f32(p.beta);
}
float k_softplus_naive(float x, const EwParams& p) {
  return std::log(1.0f + std::exp(x * f32(p.beta))) / f32(p.beta);
}
float k_exp(float x, const EwParams&) { return std::exp(x); }
float k_exp_fast(float x, const EwParams&) { return std::exp2(x * k_log2e_f); }
float k_exp2_no_scale(float x, const EwParams&) { return std::exp2(x); }
float k_log(float x, const EwParams&) { return std::log(x); }
float k_log_fast(float x, const EwParams&) { return std::log2(x) * k_ln2_f; }
float k_log2_no_scale(float x, const EwParams&) { return std::log2(x); }
float k_log_eps(float x, const EwParams&) { return std::log(x + 1e-6f); }
float rsqrt_approx_f(float x) { return f32(1.0 / std::sqrt(static_cast<double>(x))); }
float k_sqrt(float x, const EwParams&) { return std::sqrt(x); }
float k_sqrt_via_rsqrt(float x, const EwParams&) { return 1.0f / rsqrt_approx_f(x); }
float k_sqrt_eps(float x, const EwParams&) { return std::sqrt(x + 1e-6f); }
float k_rsqrt(float x, const EwParams&) { return 1.0f / std::sqrt(x); }
float k_rsqrt_approx(float x, const EwParams&) { return rsqrt_approx_f(x); }
float k_rsqrt_eps(float x, const EwParams&) { return 1.0f / std::sqrt(x + 1e-6f); }

// ---------------------------------------------------------------------------------------------
// Drivers.
template <RefScalar F>
Result<std::vector<RefOutput>> unary_reference(const RefContext& ctx) {
  const RefArg& x = ctx.input("x");
  const EwParams p = read_params(ctx);
  const auto n = static_cast<std::size_t>(x.numel());
  std::vector<double> out(n), c_acc(n);
  parallel_for(x.numel(), [&](std::int64_t b, std::int64_t e) {
    for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) {
      const RefPoint r = F(x.data[i], p);
      out[i] = r.value;
      c_acc[i] = finite(r.value) && finite(x.data[i]) ? r.c_acc : 0.0;
    }
  }, 1 << 14);
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc));
}

template <RefScalar F>
ReferenceFn unary_ref() {
  return [](const RefContext& ctx) { return unary_reference<F>(ctx); };
}

// An elementwise kernel: f in fp32 on every element, output stored once. With `tail_unwritten`
// the launch covers numel / BLOCK programs, so the last partial block is never written (its
// memory keeps whatever was there: zeros here).
template <KernScalar F>
KernelFn unary_kernel(bool tail_unwritten = false) {
  return [tail_unwritten](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& x = ctx.input("x");
    const EwParams p = read_params(ctx);
    const DType od = ctx.output_dtype();
    const std::int64_t n = x.numel();
    const std::int64_t written = tail_unwritten ? n / k_ew_block * k_ew_block : n;
    std::vector<double> out(static_cast<std::size_t>(n), 0.0);
    parallel_for(written, [&](std::int64_t b, std::int64_t e) {
      for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i)
        out[i] = round_to(od, static_cast<double>(F(f32(x.data[i]), p)));
    }, 1 << 14);
    return KernelOutputs{std::move(out)};
  };
}

template <KernScalar F>
NamedKernel tail_bug() {
  return {"tail_unwritten",
          "BLOCK=1024 with a grid of numel // BLOCK: the last partial block is never written",
          unary_kernel<F>(true)};
}

template <RefScalar R, KernScalar K>
BuiltinOp unary_op(const char* name, std::vector<NamedKernel> controls, std::vector<NamedKernel> buggy) {
  buggy.push_back(tail_bug<K>());
  return BuiltinOp{name, unary_ref<R>(), std::move(controls), std::move(buggy)};
}

const char* k_opmath = "fp32 math on the loaded values (PyTorch's opmath formula), output stored once";

// ---------------------------------------------------------------------------------------------
// Binary ops with broadcasting (numpy / PyTorch rules: shapes aligned from the right, size-1 dims
// stretch).
struct Broadcast {
  Shape out;
  std::vector<std::int64_t> sa, sb;  // a's and b's element strides aligned to `out` (0: broadcast)
};

Result<Broadcast> broadcast(const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Broadcast bc;
  bc.out.assign(r, 1);
  bc.sa.assign(r, 0);
  bc.sb.assign(r, 0);
  const Shape ca = contiguous_strides(a), cb = contiguous_strides(b);
  for (std::size_t j = 0; j < r; ++j) {
    const std::size_t d = r - 1 - j;
    const std::int64_t da = j < a.size() ? a[a.size() - 1 - j] : 1;
    const std::int64_t db = j < b.size() ? b[b.size() - 1 - j] : 1;
    if (da != db && da != 1 && db != 1)
      return make_error(ErrorCode::shape_mismatch, "shapes " + shape_to_string(a) + " and " +
                                                       shape_to_string(b) + " do not broadcast");
    bc.out[d] = da == 1 ? db : da;
    if (j < a.size() && da != 1) bc.sa[d] = ca[a.size() - 1 - j];
    if (j < b.size() && db != 1) bc.sb[d] = cb[b.size() - 1 - j];
  }
  return bc;
}

// fn(out_index, a_index, b_index) over every output element, rows in parallel.
template <class Fn>
void for_each_broadcast(const Broadcast& bc, Fn&& fn) {
  const auto rank = static_cast<std::int64_t>(bc.out.size());
  if (rank == 0) {
    fn(0, 0, 0);
    return;
  }
  const std::int64_t last = bc.out.back();
  if (last == 0 || shape_numel(bc.out) == 0) return;
  const std::int64_t rows = shape_numel(bc.out) / last;
  const std::int64_t sa_last = bc.sa.back(), sb_last = bc.sb.back();
  parallel_for(rows, [&](std::int64_t rb, std::int64_t re) {
    for (std::int64_t r = rb; r < re; ++r) {
      std::int64_t rem = r, oa = 0, ob = 0;
      for (std::int64_t d = rank - 2; d >= 0; --d) {
        const std::int64_t idx = rem % bc.out[d];
        rem /= bc.out[d];
        oa += idx * bc.sa[d];
        ob += idx * bc.sb[d];
      }
      for (std::int64_t k = 0; k < last; ++k) fn(r * last + k, oa + k * sa_last, ob + k * sb_last);
    }
  }, std::max<std::int64_t>(1, (1 << 14) / last));
}

enum class BinOp { add, mul };

Result<std::vector<RefOutput>> binary_reference(const RefContext& ctx, BinOp op) {
  const RefArg& a = ctx.input("a");
  const RefArg& b = ctx.input("b");
  GPUEMU_TRY(Broadcast bc, broadcast(a.shape, b.shape));
  const auto n = static_cast<std::size_t>(shape_numel(bc.out));
  std::vector<double> out(n), c_acc(n);
  for_each_broadcast(bc, [&](std::int64_t i, std::int64_t ia, std::int64_t ib) {
    const double x = a.data[static_cast<std::size_t>(ia)], y = b.data[static_cast<std::size_t>(ib)];
    const double v = op == BinOp::add ? x + y : x * y;
    out[static_cast<std::size_t>(i)] = v;
    c_acc[static_cast<std::size_t>(i)] =
        finite(v) && finite(x) && finite(y) ? (op == BinOp::add ? std::fabs(x) + std::fabs(y) : std::fabs(v)) : 0.0;
  });
  return single_output(ctx.output_dtype(), bc.out, std::move(out), std::move(c_acc));
}

enum class BinVariant { opmath, native, modulo_index, fp16_math, tail_unwritten };

KernelFn binary_kernel(BinOp op, BinVariant variant) {
  return [op, variant](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& a = ctx.input("a");
    const RefArg& b = ctx.input("b");
    GPUEMU_TRY(Broadcast bc, broadcast(a.shape, b.shape));
    const DType od = ctx.output_dtype();
    const std::int64_t n = shape_numel(bc.out);
    const std::int64_t written = variant == BinVariant::tail_unwritten ? n / k_ew_block * k_ew_block : n;
    const std::int64_t nb = b.numel();
    std::vector<double> out(static_cast<std::size_t>(n), 0.0);
    for_each_broadcast(bc, [&](std::int64_t i, std::int64_t ia, std::int64_t ib) {
      if (i >= written) return;
      // The modulo bug indexes b as if it were a's flat layout folded onto b's size.
      if (variant == BinVariant::modulo_index) ib = i % std::max<std::int64_t>(nb, 1);
      const double xd = a.data[static_cast<std::size_t>(ia)], yd = b.data[static_cast<std::size_t>(ib)];
      double v = 0.0;
      if (variant == BinVariant::native) {
        v = op == BinOp::add ? xd + yd : xd * yd;  // exact, rounded once below
      } else if (variant == BinVariant::fp16_math) {
        const float x = store_as(DType::float16, f32(xd)), y = store_as(DType::float16, f32(yd));
        v = store_as(DType::float16, op == BinOp::add ? x + y : x * y);
      } else {
        const float x = f32(xd), y = f32(yd);
        v = op == BinOp::add ? x + y : x * y;
      }
      out[static_cast<std::size_t>(i)] = round_to(od, v);
    });
    return KernelOutputs{std::move(out)};
  };
}

BuiltinOp binary_op(const char* name, BinOp op) {
  BuiltinOp r;
  r.name = name;
  r.reference = [op](const RefContext& ctx) { return binary_reference(ctx, op); };
  r.controls = {
      {"fp32_opmath", "loads a and b (b through its broadcast strides), fp32 op, output stored once",
       binary_kernel(op, BinVariant::opmath)},
      {"native_dtype", "the op in the input dtype's own arithmetic (exact result rounded once)",
       binary_kernel(op, BinVariant::native)},
  };
  r.buggy = {
      {"broadcast_by_modulo", "indexes b as b[i % b.numel()]: right only when b broadcasts along "
                              "leading dims, wrong for b of shape [R, 1]",
       binary_kernel(op, BinVariant::modulo_index)},
      {"fp16_math", "casts both operands and the result through float16: loses fp32 precision and "
                    "overflows bf16/fp32 values past 65504", binary_kernel(op, BinVariant::fp16_math)},
      {"tail_unwritten", "BLOCK=1024 with a grid of numel // BLOCK: the last partial block is never "
                         "written", binary_kernel(op, BinVariant::tail_unwritten)},
  };
  return r;
}

// ---------------------------------------------------------------------------------------------
// Gated ops: out = act(gate) * up, gate and up of one shape.
enum class Gate { silu, gelu };

Result<std::vector<RefOutput>> gated_reference(const RefContext& ctx, Gate gate_kind) {
  const RefArg& g = ctx.input("gate");
  const RefArg& u = ctx.input("up");
  if (g.shape != u.shape)
    return make_error(ErrorCode::shape_mismatch, "gate " + shape_to_string(g.shape) + " and up " +
                                                     shape_to_string(u.shape) + " differ in shape");
  const EwParams p = read_params(ctx);
  const double in_min_normal = dtype_info(g.dtype).min_normal;
  const auto n = static_cast<std::size_t>(g.numel());
  std::vector<double> out(n), c_acc(n), c_in(n);
  parallel_for(g.numel(), [&](std::int64_t b, std::int64_t e) {
    for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) {
      RefPoint a = gate_kind == Gate::silu ? silu64(g.data[i]) : gelu64(g.data[i], p.tanh_approx);
      // Times an infinite `up`, whether the activation is 0 decides NaN versus +-Inf. PyTorch's
      // formulas in fp32 (what eager mode and most fused kernels evaluate) give exactly 0 where
      // 1 + erf / 1 + tanh cancel (gelu, x < -5.5) or exp(-x) overflows (silu, x < -88.7): the
      // reference follows them there. (Finite `up` keeps the true, tiny product.)
      if (!finite(u.data[i])) {
        const float g32 = f32(g.data[i]);
        if ((gate_kind == Gate::silu ? k_silu(g32, p) : k_gelu(g32, p)) == 0.0f)
          a.value = std::copysign(0.0, a.value);
      }
      const double v = a.value * u.data[i];
      out[i] = v;
      const bool ok = finite(v) && finite(g.data[i]) && finite(u.data[i]);
      // An activation near underflow is only known to its dtype's subnormal spacing (half of it is
      // u * min_normal), which `up` then amplifies: fp32 in fused kernels, the input dtype in
      // unfused ones.
      const double up = std::fabs(u.data[i]);
      c_acc[i] = ok ? a.c_acc * up + std::fabs(v) + up * k_fp32_min_normal : 0.0;
      c_in[i] = ok ? std::fabs(v) + up * in_min_normal : 0.0;
    }
  }, 1 << 14);
  return single_output(ctx.output_dtype(), g.shape, std::move(out), std::move(c_acc), std::move(c_in));
}

enum class GatedVariant { fused, unfused_rounded, swapped, tail_unwritten };

template <KernScalar Act>
KernelFn gated_kernel(GatedVariant variant) {
  return [variant](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& g = ctx.input("gate");
    const RefArg& u = ctx.input("up");
    if (g.shape != u.shape) return make_error(ErrorCode::shape_mismatch, "gate and up differ in shape");
    const EwParams p = read_params(ctx);
    const DType od = ctx.output_dtype();
    const std::int64_t n = g.numel();
    const std::int64_t written = variant == GatedVariant::tail_unwritten ? n / k_ew_block * k_ew_block : n;
    std::vector<double> out(static_cast<std::size_t>(n), 0.0);
    parallel_for(written, [&](std::int64_t b, std::int64_t e) {
      for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) {
        float gate = f32(g.data[i]), up = f32(u.data[i]);
        if (variant == GatedVariant::swapped) std::swap(gate, up);
        float a = Act(gate, p);
        if (variant == GatedVariant::unfused_rounded) a = store_as(g.dtype, a);
        out[i] = round_to(od, static_cast<double>(a * up));
      }
    }, 1 << 14);
    return KernelOutputs{std::move(out)};
  };
}

BuiltinOp swiglu_op() {
  BuiltinOp r;
  r.name = "swiglu";
  r.reference = [](const RefContext& ctx) { return gated_reference(ctx, Gate::silu); };
  r.controls = {
      {"fused_fp32", "silu(gate) * up in fp32, output stored once", gated_kernel<k_silu>(GatedVariant::fused)},
      {"fused_fast", "exp2-based sigmoid, silu(gate) * up in fp32", gated_kernel<k_silu_fast>(GatedVariant::fused)},
      {"unfused_rounded", "F.silu(gate) * up: the activation is stored in the input dtype before the "
                          "product", gated_kernel<k_silu>(GatedVariant::unfused_rounded)},
  };
  r.buggy = {
      {"swapped_gate_up", "silu(up) * gate", gated_kernel<k_silu>(GatedVariant::swapped)},
      {"sigmoid_gate", "sigmoid(gate) * up (GLU instead of SwiGLU)", gated_kernel<k_sigmoid>(GatedVariant::fused)},
      {"tail_unwritten", "BLOCK=1024 with a grid of numel // BLOCK",
       gated_kernel<k_silu>(GatedVariant::tail_unwritten)},
  };
  return r;
}

BuiltinOp geglu_op() {
  BuiltinOp r;
  r.name = "geglu";
  r.reference = [](const RefContext& ctx) { return gated_reference(ctx, Gate::gelu); };
  r.controls = {
      {"fused_fp32", "gelu(gate) * up in fp32 (erf or tanh form per `approximate`)",
       gated_kernel<k_gelu>(GatedVariant::fused)},
      {"unfused_rounded", "F.gelu(gate) * up: the activation is stored in the input dtype first",
       gated_kernel<k_gelu>(GatedVariant::unfused_rounded)},
  };
  r.buggy = {
      {"swapped_gate_up", "gelu(up) * gate", gated_kernel<k_gelu>(GatedVariant::swapped)},
      {"tanh_const_0044", "tanh-approximate gelu with 0.044 for 0.044715, whatever `approximate` says",
       gated_kernel<k_gelu_const_0044>(GatedVariant::fused)},
      {"tail_unwritten", "BLOCK=1024 with a grid of numel // BLOCK",
       gated_kernel<k_gelu>(GatedVariant::tail_unwritten)},
  };
  return r;
}

}  // namespace

void register_elementwise_ops(BuiltinRegistry& r) {
  r.add(unary_op<ref_relu, k_relu>(
      "relu", {{"fp32_opmath", k_opmath, unary_kernel<k_relu>()}},
      {{"fmax_drops_nan", "fmaxf(x, 0): returns 0 for NaN where torch.relu propagates it",
        unary_kernel<k_relu_fmax>()}}));
  r.add(unary_op<ref_leaky_relu, k_leaky>(
      "leaky_relu",
      {{"fp32_opmath", k_opmath, unary_kernel<k_leaky>()},
       {"fp32_select", "x * (x > 0 ? 1 : slope)", unary_kernel<k_leaky_select>()}},
      {{"wrong_slope", "hard-codes slope 0.1 instead of the negative_slope attr (0.01)",
        unary_kernel<k_leaky_wrong_slope>()}}));
  r.add(unary_op<ref_gelu, k_gelu>(
      "gelu",
      {{"fp32_opmath", "0.5x(1 + erf(x/sqrt2)) or 0.5x(1 + tanh(...)) in fp32", unary_kernel<k_gelu>()},
       {"fp32_fast", "0.5x erfc(-x/sqrt2), or the tanh form as x*sigmoid(2y) with exp2",
        unary_kernel<k_gelu_fast>()}},
      {{"tanh_const_0044", "tanh approximation with 0.044 instead of 0.044715, whatever "
                           "`approximate` says", unary_kernel<k_gelu_const_0044>()},
       {"sigmoid_approx", "x * sigmoid(1.702x) instead of the erf/tanh forms",
        unary_kernel<k_gelu_sigmoid_approx>()}}));
  r.add(unary_op<ref_silu, k_silu>(
      "silu",
      {{"fp32_opmath", "x / (1 + exp(-x)) in fp32", unary_kernel<k_silu>()},
       {"fp32_fast", "x * 1/(1 + exp2(-x*log2e))", unary_kernel<k_silu_fast>()}},
      {{"overflow_nan", "x * exp(x) / (1 + exp(x)): Inf/Inf = NaN for x > 88",
        unary_kernel<k_silu_overflow>()}}));
  r.add(unary_op<ref_sigmoid, k_sigmoid>(
      "sigmoid",
      {{"fp32_opmath", "1 / (1 + exp(-x)) in fp32", unary_kernel<k_sigmoid>()},
       {"fp32_fast", "1 / (1 + exp2(-x*log2e))", unary_kernel<k_sigmoid_fast>()}},
      {{"overflow_nan", "exp(x) / (1 + exp(x)): NaN for x > 88", unary_kernel<k_sigmoid_overflow>()},
       {"tanh_half_wrong", "0.5*tanh(x) + 0.5 (should be tanh(x/2))", unary_kernel<k_sigmoid_tanh_half>()}}));
  r.add(unary_op<ref_tanh, k_tanh>(
      "tanh",
      {{"fp32_opmath", "tanhf", unary_kernel<k_tanh>()},
       {"fp32_expm1", "e = expm1(2 clamp(x, -10, 10)); e / (e + 2)", unary_kernel<k_tanh_expm1>()}},
      {{"overflow_nan", "(exp(2x) - 1) / (exp(2x) + 1): NaN for x > 44, cancellation near 0",
        unary_kernel<k_tanh_overflow>()}}));
  r.add(unary_op<ref_elu, k_elu>(
      "elu",
      {{"fp32_opmath", "alpha * (exp(x) - 1) for x <= 0 (PyTorch's CPU formula)", unary_kernel<k_elu>()},
       {"fp32_expm1", "alpha * expm1(x) for x <= 0", unary_kernel<k_elu_expm1>()}},
      {{"missing_minus_one", "alpha * exp(x) for x <= 0", unary_kernel<k_elu_no_minus_one>()}}));
  r.add(unary_op<ref_softplus, k_softplus>(
      "softplus",
      {{"fp32_opmath", "beta*x > threshold ? x : log1p(exp(beta*x)) / beta", unary_kernel<k_softplus>()},
       {"fp32_stable", "(max(bx, 0) + log1p(exp(-|bx|))) / beta below the threshold",
        unary_kernel<k_softplus_stable>()}},
      {{"naive_log_exp", "log(1 + exp(beta*x)) / beta, no threshold and no log1p: Inf for x > 88, "
                         "0 for x < -17", unary_kernel<k_softplus_naive>()}}));
  r.add(unary_op<ref_exp, k_exp>(
      "exp",
      {{"fp32_opmath", "expf", unary_kernel<k_exp>()},
       {"fp32_fast", "exp2(x * log2e) (__expf / tl.exp)", unary_kernel<k_exp_fast>()}},
      {{"exp2_no_scale", "exp2(x): the log2(e) factor is missing", unary_kernel<k_exp2_no_scale>()}}));
  r.add(unary_op<ref_log, k_log>(
      "log",
      {{"fp32_opmath", "logf", unary_kernel<k_log>()},
       {"fp32_fast", "log2(x) * ln2 (__logf)", unary_kernel<k_log_fast>()}},
      {{"log2_no_scale", "log2(x): the ln2 factor is missing", unary_kernel<k_log2_no_scale>()},
       {"eps_added", "log(x + 1e-6) \"for stability\"", unary_kernel<k_log_eps>()}}));
  r.add(unary_op<ref_sqrt, k_sqrt>(
      "sqrt",
      {{"fp32_opmath", "sqrtf", unary_kernel<k_sqrt>()},
       {"fp32_rsqrt_reciprocal", "1 / rsqrt(x)", unary_kernel<k_sqrt_via_rsqrt>()}},
      {{"eps_added", "sqrt(x + 1e-6) \"for stability\"", unary_kernel<k_sqrt_eps>()}}));
  r.add(unary_op<ref_rsqrt, k_rsqrt>(
      "rsqrt",
      {{"fp32_opmath", "1 / sqrtf(x)", unary_kernel<k_rsqrt>()},
       {"fp32_rsqrt", "a hardware rsqrt (correctly rounded here)", unary_kernel<k_rsqrt_approx>()}},
      {{"eps_added", "1 / sqrt(x + 1e-6) \"for stability\"", unary_kernel<k_rsqrt_eps>()}}));
  r.add(binary_op("add", BinOp::add));
  r.add(binary_op("mul", BinOp::mul));
  r.add(swiglu_op());
  r.add(geglu_op());
}

}  // namespace gpuemu::ops
