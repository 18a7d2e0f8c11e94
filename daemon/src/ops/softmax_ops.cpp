// softmax and log_softmax over `dim`: fp64 references, correct fp32 controls (two-pass tiled,
// online), and known-buggy kernels (padded tail leaking into the denominator, no max subtraction,
// online softmax without the rescale).
#include "core/parallel.hpp"
#include "ops/op_util.hpp"
#include "ops/register.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpuemu::ops {
namespace {

constexpr double k_neg_inf = -std::numeric_limits<double>::infinity();

// Reference softmax / log_softmax of one strided row (fp64), with its condition terms.
Result<std::vector<RefOutput>> reference(const RefContext& ctx, bool log) {
  const RefArg& x = ctx.input("x");
  GPUEMU_TRY(ReduceGeom g, reduce_geom(x.shape, ctx.attr_int("dim")));
  const auto n = static_cast<std::size_t>(x.numel());
  std::vector<double> out(n), c_acc(n);
  const double sqrt_len = std::sqrt(static_cast<double>(std::max<std::int64_t>(g.len, 1)));
  parallel_for(g.outer * g.inner, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::int64_t o = r / g.inner, i = r % g.inner;
      double m = k_neg_inf;
      bool nan = false;
      for (std::int64_t k = 0; k < g.len; ++k) {
        double v = x.data[g.index(o, k, i)];
        nan |= std::isnan(v);
        m = std::max(m, v);
      }
      if (nan) m = std::numeric_limits<double>::quiet_NaN();
      double s = 0;
      for (std::int64_t k = 0; k < g.len; ++k) s += std::exp(x.data[g.index(o, k, i)] - m);
      const double lse = m + std::log(s);
      for (std::int64_t k = 0; k < g.len; ++k) {
        const auto idx = g.index(o, k, i);
        const double v = x.data[idx];
        const double spread = std::fabs(v - m);
        if (log) {
          out[idx] = v - lse;
          c_acc[idx] = std::isfinite(lse) && std::isfinite(v)
                           ? std::fabs(v) + std::fabs(m) + std::fabs(lse) + 1.0 : 0.0;
        } else {
          out[idx] = std::exp(v - m) / s;
          c_acc[idx] = std::isfinite(spread) ? out[idx] * (2.0 + spread) * sqrt_len : 0.0;
        }
      }
    }
  }, 64);
  return single_output(ctx.output_dtype(), x.shape, std::move(out), std::move(c_acc));
}

// How the emulated kernels treat one row.
enum class Variant { two_pass, online, tail_leak, no_max, online_no_rescale };

// One row the way a tiled fp32 kernel computes it: inputs are the case dtype's values, all math in
// float, tiles of `block` elements, output rounded to the output dtype by the caller.
void kernel_row(const std::vector<double>& x, const ReduceGeom& g, std::int64_t o, std::int64_t i,
                bool log, Variant variant, std::int64_t block, std::vector<double>& out) {
  const std::int64_t len = g.len;
  const std::int64_t padded = (len + block - 1) / block * block;
  auto load = [&](std::int64_t k) -> float {
    if (k < len) return f32(x[g.index(o, k, i)]);
    // Out-of-range lanes: a correct kernel loads -inf (masked); the tail-leak bug loads 0.
    return variant == Variant::tail_leak ? 0.0f : -std::numeric_limits<float>::infinity();
  };
  float m = -std::numeric_limits<float>::infinity();
  float s = 0.0f;
  if (variant == Variant::online || variant == Variant::online_no_rescale) {
    for (std::int64_t t = 0; t < padded; t += block) {
      float tile_max = -std::numeric_limits<float>::infinity();
      for (std::int64_t k = t; k < t + block; ++k) tile_max = std::max(tile_max, load(k));
      const float m_new = std::max(m, tile_max);
      float tile_sum = 0.0f;
      for (std::int64_t k = t; k < t + block; ++k) {
        float v = load(k);
        if (v != -std::numeric_limits<float>::infinity()) tile_sum += std::exp(v - m_new);
      }
      const float alpha = (m == -std::numeric_limits<float>::infinity()) ? 0.0f : std::exp(m - m_new);
      s = (variant == Variant::online ? s * alpha : s) + tile_sum;
      m = m_new;
    }
  } else {
    if (variant != Variant::no_max)
      for (std::int64_t k = 0; k < padded; ++k) m = std::max(m, load(k));
    else
      m = 0.0f;
    for (std::int64_t t = 0; t < padded; t += block) {
      float tile_sum = 0.0f;
      for (std::int64_t k = t; k < t + block; ++k) {
        float v = load(k);
        if (v != -std::numeric_limits<float>::infinity()) tile_sum += std::exp(v - m);
      }
      s += tile_sum;
    }
  }
  const float log_s = std::log(s);
  for (std::int64_t k = 0; k < len; ++k) {
    const float v = load(k);
    out[g.index(o, k, i)] = log ? static_cast<double>((v - m) - log_s)
                                : static_cast<double>(std::exp(v - m) / s);
  }
}

KernelFn emulated(bool log, Variant variant, std::int64_t block) {
  return [=](const RefContext& ctx) -> Result<std::vector<std::vector<double>>> {
    const RefArg& x = ctx.input("x");
    GPUEMU_TRY(ReduceGeom g, reduce_geom(x.shape, ctx.attr_int("dim")));
    std::vector<double> out(static_cast<std::size_t>(x.numel()));
    parallel_for(g.outer * g.inner, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r)
        kernel_row(x.data, g, r / g.inner, r % g.inner, log, variant, block, out);
    }, 64);
    return std::vector<std::vector<double>>{round_all(ctx.output_dtype(), std::move(out))};
  };
}

BuiltinOp make_op(const std::string& name, bool log) {
  BuiltinOp op;
  op.name = name;
  op.reference = [log](const RefContext& ctx) { return reference(ctx, log); };
  op.controls = {
      {"fp32_two_pass", "max pass, then fp32 tile sums of exp(x - max) over 1024-wide tiles",
       emulated(log, Variant::two_pass, 1024)},
      {"fp32_online", "online softmax over 128-wide tiles with the running-sum rescale",
       emulated(log, Variant::online, 128)},
  };
  op.buggy = {
      {"tail_leak", "BLOCK=128; the last partial tile loads 0 instead of -inf, so the padding "
                    "leaks into the max and the denominator", emulated(log, Variant::tail_leak, 128)},
      {"no_max_subtraction", "exp(x) without subtracting the row max: overflows on large logits",
       emulated(log, Variant::no_max, 1024)},
      {"online_no_rescale", "online softmax that forgets s *= exp(m_old - m_new)",
       emulated(log, Variant::online_no_rescale, 128)},
  };
  return op;
}

}  // namespace

void register_softmax_ops(BuiltinRegistry& r) {
  r.add(make_op("softmax", false));
  r.add(make_op("log_softmax", true));
}

}  // namespace gpuemu::ops
