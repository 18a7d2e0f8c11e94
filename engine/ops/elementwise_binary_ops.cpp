// The binary elementwise ops: add and mul with PyTorch broadcasting, and the gated swiglu =
// silu(gate) * up and geglu = gelu(gate) * up. fp64 references with their condition terms, fp32
// controls (fused, and unfused with the activation stored in the input dtype), known-buggy kernels.
//
// Error model (docs/error-model.md): add c_acc = |a| + |b|, mul c_acc = |a * b|. Gated: the
// activation's term (|g f'(g)| + |f(g)| [+ 8 * 0.5|g| with gelu: erf's absolute error, as in gelu]) times |up| plus |out| and
// |up| * FLT_MIN; c_in = |out| + |up| * the input dtype's smallest normal (unfused kernels round
// the activation to the input dtype; both tiny terms are the activation's resolution near
// underflow).
#include "core/parallel.hpp"
#include "ops/elementwise_math.hpp"
#include "ops/register.hpp"

#include <cmath>

namespace gpuemu::ops {
namespace {

using namespace ew;

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
  parallel_for(
      rows,
      [&](std::int64_t rb, std::int64_t re) {
        for (std::int64_t r = rb; r < re; ++r) {
          std::int64_t rem = r, oa = 0, ob = 0;
          for (std::int64_t d = rank - 2; d >= 0; --d) {
            const std::int64_t idx = rem % bc.out[d];
            rem /= bc.out[d];
            oa += idx * bc.sa[d];
            ob += idx * bc.sb[d];
          }
          for (std::int64_t k = 0; k < last; ++k)
            fn(r * last + k, oa + k * sa_last, ob + k * sb_last);
        }
      },
      std::max<std::int64_t>(1, (1 << 14) / last));
}

enum class BinOp { add, mul };

Result<std::vector<RefOutput>> binary_reference(const RefContext& ctx, BinOp op) {
  const RefArg& a = ctx.input("a");
  const RefArg& b = ctx.input("b");
  GPUEMU_TRY(Broadcast bc, broadcast(a.shape, b.shape));
  const auto n = static_cast<std::size_t>(shape_numel(bc.out));
  RefVec out(n), c_acc(n);
  for_each_broadcast(bc, [&](std::int64_t i, std::int64_t ia, std::int64_t ib) {
    const double x = a.data[static_cast<std::size_t>(ia)], y = b.data[static_cast<std::size_t>(ib)];
    const double v = op == BinOp::add ? x + y : x * y;
    out[static_cast<std::size_t>(i)] = v;
    c_acc[static_cast<std::size_t>(i)] =
        finite(v) && finite(x) && finite(y)
            ? (op == BinOp::add ? std::fabs(x) + std::fabs(y) : std::fabs(v))
            : 0.0;
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
    const std::int64_t written =
        variant == BinVariant::tail_unwritten ? n / k_ew_block * k_ew_block : n;
    const std::int64_t nb = b.numel();
    std::vector<double> out(static_cast<std::size_t>(n), 0.0);
    for_each_broadcast(bc, [&](std::int64_t i, std::int64_t ia, std::int64_t ib) {
      if (i >= written) return;
      // The modulo bug indexes b as if it were a's flat layout folded onto b's size.
      if (variant == BinVariant::modulo_index) ib = i % std::max<std::int64_t>(nb, 1);
      const double xd = a.data[static_cast<std::size_t>(ia)],
                   yd = b.data[static_cast<std::size_t>(ib)];
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
      {"fp32_opmath",
       "loads a and b (b through its broadcast strides), fp32 op, output stored once",
       binary_kernel(op, BinVariant::opmath)},
      {"native_dtype", "the op in the input dtype's own arithmetic (exact result rounded once)",
       binary_kernel(op, BinVariant::native)},
  };
  r.buggy = {
      {"broadcast_by_modulo",
       "indexes b as b[i % b.numel()]: right only when b broadcasts along "
       "leading dims, wrong for b of shape [R, 1]",
       binary_kernel(op, BinVariant::modulo_index)},
      {"fp16_math",
       "casts both operands and the result through float16: loses fp32 precision and "
       "overflows bf16/fp32 values past 65504",
       binary_kernel(op, BinVariant::fp16_math)},
      {"tail_unwritten",
       "BLOCK=1024 with a grid of numel // BLOCK: the last partial block is never "
       "written",
       binary_kernel(op, BinVariant::tail_unwritten)},
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
  const double in_half_subnormal = dtype_info(g.dtype).min_subnormal / 2;
  const auto n = static_cast<std::size_t>(g.numel());
  RefVec out(n), c_acc(n), c_in(n);
  std::vector<std::uint8_t> alt(n, 0);
  parallel_for(
      g.numel(),
      [&](std::int64_t b, std::int64_t e) {
        for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) {
          RefPoint a =
              gate_kind == Gate::silu ? silu64(g.data[i]) : gelu64(g.data[i], p.tanh_approx);
          // Times an infinite `up`, whether the activation is 0 decides NaN versus +-Inf. PyTorch's
          // formulas in fp32 (what eager mode and most fused kernels evaluate) give exactly 0 where
          // 1 + erf / 1 + tanh cancel (gelu, x < -5.5) or exp(-x) overflows (silu, x < -88.7): the
          // reference follows them there. (Finite `up` keeps the true, tiny product.)
          if (!finite(u.data[i])) {
            const float g32 = f32(g.data[i]);
            if ((gate_kind == Gate::silu ? k_silu(g32, p) : k_gelu(g32, p)) == 0.0f)
              a.value = std::copysign(0.0, a.value);
            // An activation within its own fp32 error of 0 (other erf/tanh/exp implementations
            // reach exactly 0 at other points), or below half the input dtype's smallest
            // subnormal (an unfused kernel stores it there), may be 0 or a tiny value of either
            // sign in a correct kernel: times Inf, NaN or either infinity.
            if (std::fabs(a.value) <= 0x1.0p-24 * a.c_acc || std::fabs(a.value) < in_half_subnormal)
              alt[i] = k_alt_any_nonfinite;
          }
          const double v = a.value * u.data[i];
          out[i] = v;
          const bool ok = finite(v) && finite(g.data[i]) && finite(u.data[i]);
          // An activation near underflow is only known to its dtype's subnormal spacing (half of it
          // is u * min_normal), which `up` then amplifies: fp32 in fused kernels, the input dtype
          // in unfused ones.
          const double up = std::fabs(u.data[i]);
          c_acc[i] = ok ? a.c_acc * up + std::fabs(v) + up * k_fp32_min_normal : 0.0;
          c_in[i] = ok ? std::fabs(v) + up * in_min_normal : 0.0;
        }
      },
      1 << 14);
  return single_output(ctx.output_dtype(), g.shape, std::move(out), std::move(c_acc),
                       std::move(c_in), std::move(alt));
}

enum class GatedVariant { fused, unfused_rounded, swapped, tail_unwritten };

template <KernScalar Act>
KernelFn gated_kernel(GatedVariant variant) {
  return [variant](const RefContext& ctx) -> Result<KernelOutputs> {
    const RefArg& g = ctx.input("gate");
    const RefArg& u = ctx.input("up");
    if (g.shape != u.shape)
      return make_error(ErrorCode::shape_mismatch, "gate and up differ in shape");
    const EwParams p = read_params(ctx);
    const DType od = ctx.output_dtype();
    const std::int64_t n = g.numel();
    const std::int64_t written =
        variant == GatedVariant::tail_unwritten ? n / k_ew_block * k_ew_block : n;
    std::vector<double> out(static_cast<std::size_t>(n), 0.0);
    parallel_for(
        written,
        [&](std::int64_t b, std::int64_t e) {
          for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) {
            float gate = f32(g.data[i]), up = f32(u.data[i]);
            if (variant == GatedVariant::swapped) std::swap(gate, up);
            float a = Act(gate, p);
            if (variant == GatedVariant::unfused_rounded) a = store_as(g.dtype, a);
            out[i] = round_to(od, static_cast<double>(a * up));
          }
        },
        1 << 14);
    return KernelOutputs{std::move(out)};
  };
}

BuiltinOp swiglu_op() {
  BuiltinOp r;
  r.name = "swiglu";
  r.reference = [](const RefContext& ctx) { return gated_reference(ctx, Gate::silu); };
  r.controls = {
      {"fused_fp32", "silu(gate) * up in fp32, output stored once",
       gated_kernel<k_silu>(GatedVariant::fused)},
      {"fused_fast", "exp2-based sigmoid, silu(gate) * up in fp32",
       gated_kernel<k_silu_fast>(GatedVariant::fused)},
      {"unfused_rounded",
       "F.silu(gate) * up: the activation is stored in the input dtype before the "
       "product",
       gated_kernel<k_silu>(GatedVariant::unfused_rounded)},
  };
  r.buggy = {
      {"swapped_gate_up", "silu(up) * gate", gated_kernel<k_silu>(GatedVariant::swapped)},
      {"sigmoid_gate", "sigmoid(gate) * up (GLU instead of SwiGLU)",
       gated_kernel<k_sigmoid>(GatedVariant::fused)},
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
      {"tanh_const_0044",
       "tanh-approximate gelu with 0.044 for 0.044715, whatever `approximate` says",
       gated_kernel<k_gelu_const_0044>(GatedVariant::fused)},
      {"tail_unwritten", "BLOCK=1024 with a grid of numel // BLOCK",
       gated_kernel<k_gelu>(GatedVariant::tail_unwritten)},
  };
  return r;
}

}  // namespace

void register_binary_elementwise_ops(BuiltinRegistry& r) {
  r.add(binary_op("add", BinOp::add));
  r.add(binary_op("mul", BinOp::mul));
  r.add(swiglu_op());
  r.add(geglu_op());
}

}  // namespace gpuemu::ops
