#include "gpuemu/engine/verdict.hpp"

#include "ops/op_util.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

namespace gpuemu {

namespace {

// normalised_error's dtype facts, looked up once per output rather than once per element.
struct ErrorScale {
  double u_out, u_in, min_normal, min_subnormal;
  bool floating;
  bool exact;
  ErrorScale(DType out_dtype, DType in_dtype, bool exact_op) {
    const auto& o = dtype_info(out_dtype);
    const auto& i = dtype_info(in_dtype);
    u_out = o.is_floating ? o.unit_roundoff : 0.0;
    u_in = i.is_floating ? i.unit_roundoff : 0.0;
    min_normal = o.min_normal;
    min_subnormal = o.min_subnormal;
    floating = o.is_floating;
    exact = exact_op;
  }
  double operator()(double out, double ref, double c_acc, double c_in) const {
    const double bound = exact ? 0.0 : u_out * std::fabs(ref) + k_u_acc * c_acc + u_in * c_in;
    // The floor near zero. A correct result within reach of the subnormal range (its reference
    // below the smallest normal, give or take what the bound lets it move) may come back flushed
    // to zero (FTZ) or as the smallest normal: there the floor is the smallest normal. Elsewhere
    // flushing cannot happen, and the floor is the subnormal spacing: a floor of min_normal
    // everywhere let a float16 softmax 5 % too large pass on every row of 1,000 or more (outputs
    // near 1e-3, floor 6e-5).
    double tiny = 0.5;
    if (floating) tiny = std::fabs(ref) <= min_normal + k_floor_reach * bound ? min_normal : min_subnormal;
    return std::fabs(out - ref) / (bound + tiny);
  }
};

// ErrorScale over whole buffers: err[e] = scale(out[e], ref[e], c_acc[e], c_in[e]) (an empty c_acc
// or c_in counts as 0), four lanes at a time with the same operations in the same order (no FMA is
// contracted anywhere in the build), so every element's error is the scalar one bit for bit.
// Non-finite elements get whatever the arithmetic gives; the verdict's loop decides those itself.
using v4d = double __attribute__((vector_size(32)));
using v4u = std::uint64_t __attribute__((vector_size(32)));

[[gnu::always_inline]] inline v4d abs4(v4d x) {  // fabs: the sign bit cleared, -0 included
  return reinterpret_cast<v4d>(reinterpret_cast<v4u>(x) & 0x7fffffffffffffffULL);
}

[[gnu::always_inline]] inline void errors_of(const ErrorScale& sc, const double* out, const double* ref,
                                             const double* ca, const double* ci, double* err, std::size_t n) {
  std::size_t e = 0;
  for (; e + 4 <= n; e += 4) {
    v4d o, r, a = v4d{}, c = v4d{};
    __builtin_memcpy(&o, out + e, sizeof o);
    __builtin_memcpy(&r, ref + e, sizeof r);
    if (ca) __builtin_memcpy(&a, ca + e, sizeof a);
    if (ci) __builtin_memcpy(&c, ci + e, sizeof c);
    const v4d ar = abs4(r);
    const v4d bound = sc.exact ? v4d{} : sc.u_out * ar + k_u_acc * a + sc.u_in * c;
    v4d tiny = v4d{} + 0.5;
    if (sc.floating) tiny = ar <= sc.min_normal + k_floor_reach * bound ? v4d{} + sc.min_normal : v4d{} + sc.min_subnormal;
    const v4d q = abs4(o - r) / (bound + tiny);
    __builtin_memcpy(err + e, &q, sizeof q);
  }
  for (; e < n; ++e) err[e] = sc(out[e], ref[e], ca ? ca[e] : 0.0, ci ? ci[e] : 0.0);
}

[[gnu::target("avx2")]] void errors_of_avx2(const ErrorScale& sc, const double* out, const double* ref,
                                            const double* ca, const double* ci, double* err, std::size_t n) {
  errors_of(sc, out, ref, ca, ci, err, n);
}

void errors_of_base(const ErrorScale& sc, const double* out, const double* ref, const double* ca,
                    const double* ci, double* err, std::size_t n) {
  errors_of(sc, out, ref, ca, ci, err, n);
}

const bool k_errors_avx2 = __builtin_cpu_supports("avx2");

}  // namespace

double normalised_error(double out, double ref, double c_acc, double c_in, DType out_dtype,
                        DType in_dtype, bool exact) {
  return ErrorScale(out_dtype, in_dtype, exact)(out, ref, c_acc, c_in);
}

double inf_stand_in(DType dtype) {
  const auto& info = dtype_info(dtype);
  const double inf = std::numeric_limits<double>::infinity();
  if (!info.is_floating || !std::isinf(round_to(dtype, inf)))
    return std::numeric_limits<double>::quiet_NaN();
  // max = (2 - 2^-m) * 2^emax, one ulp there is 2^(emax - m): max + ulp = 2^(emax + 1).
  const double v =
      info.max_finite + std::ldexp(1.0, std::ilogb(info.max_finite) - info.mantissa_bits);
  return std::isfinite(v) ? v : std::numeric_limits<double>::quiet_NaN();  // float64: 2^1024
}

namespace {

std::vector<std::int64_t> coords_of(std::int64_t index, const Shape& shape) {
  std::vector<std::int64_t> c(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    c[d] = shape[d] ? index % shape[d] : 0;
    index = shape[d] ? index / shape[d] : 0;
  }
  return c;
}

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

// Enough digits to tell neighbouring values of any dtype apart (an exact op's one-ulp difference).
std::string fmt_exact(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// argmax: the chosen index must hold a value tied (within input rounding) with the maximum.
void judge_argmax(const RefContext& ctx, const RefOutput& ref, const std::vector<double>& out,
                  OutputVerdict& v) {
  const RefArg& x = ctx.input("x");
  const std::int64_t dim_attr = ctx.attrs.contains("dim") && ctx.attrs["dim"].is_number_integer()
                                    ? ctx.attrs["dim"].get<std::int64_t>()
                                    : -1;
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  const std::int64_t dim = dim_attr < 0 ? dim_attr + rank : dim_attr;
  std::int64_t outer = 1, len = 1, inner = 1;
  for (std::int64_t d = 0; d < rank; ++d) (d < dim ? outer : d == dim ? len : inner) *= x.shape[d];
  const double u_in = dtype_info(x.dtype).unit_roundoff;
  v.errors.assign(out.size(), 0.0);  // a wrong index: infinitely wrong
  for (std::size_t e = 0; e < out.size(); ++e) {
    const auto o = static_cast<std::int64_t>(e) / inner, i = static_cast<std::int64_t>(e) % inner;
    const auto chosen = static_cast<std::int64_t>(out[e]);
    const auto want = static_cast<std::int64_t>(ref.value[e]);
    bool ok = chosen == want;
    if (!ok && chosen >= 0 && chosen < len) {
      const double a = x.data[(o * len + chosen) * inner + i];
      const double m = x.data[(o * len + want) * inner + i];
      ok = (std::isnan(m) && std::isnan(a)) || (!std::isnan(m) && a >= m - u_in * std::fabs(m));
    }
    if (!ok) {
      if (v.failing == 0) {
        v.worst_index = static_cast<std::int64_t>(e);
        v.worst_out = out[e];
        v.worst_ref = ref.value[e];
      }
      ++v.failing;
      v.errors[e] = std::numeric_limits<double>::infinity();
    }
  }
  v.max_error = v.failing ? std::numeric_limits<double>::infinity() : 0.0;
  if (v.failing)
    v.message = std::to_string(v.failing) +
                " index(es) point at a value that is not the maximum (first at " +
                std::to_string(v.worst_index) + ": got " + fmt(v.worst_out) + ", expected " +
                fmt(v.worst_ref) + ")";
}

}  // namespace

std::vector<std::vector<double>> rounded_reference(const std::vector<RefOutput>& reference) {
  std::vector<std::vector<double>> out;
  out.reserve(reference.size());
  for (const auto& ref : reference) {
    std::vector<double> r(ref.value.begin(), ref.value.end());
    if (dtype_info(ref.dtype).is_floating) round_elements(ref.dtype, r.data(), r.size());
    out.push_back(std::move(r));
  }
  return out;
}

Verdict judge(const OpSchema& schema, const RefContext& ctx,
              const std::vector<RefOutput>& reference, const std::vector<Tensor>& outputs,
              double envelope, const std::vector<std::vector<double>>* rounded) {
  Verdict verdict;
  verdict.envelope = envelope;
  const bool derived = schema.reference.rfind("torch:", 0) == 0;
  if (outputs.size() != reference.size()) {
    verdict.passed = false;
    verdict.message = "expected " + std::to_string(reference.size()) + " output(s), got " +
                      std::to_string(outputs.size());
    verdict.max_error = std::numeric_limits<double>::infinity();
    return verdict;
  }
  for (std::size_t k = 0; k < reference.size(); ++k) {
    const RefOutput& ref = reference[k];
    const Tensor& got = outputs[k];
    OutputVerdict v;
    v.name = ref.name;
    v.shape = ref.shape;
    if (got.shape() != ref.shape) {
      v.passed = false;
      v.max_error = std::numeric_limits<double>::infinity();
      v.message = "shape mismatch: output '" + ref.name + "' has shape " +
                  shape_to_string(got.shape()) + ", expected " + shape_to_string(ref.shape);
    } else if (got.dtype() != ref.dtype) {
      v.passed = false;
      v.max_error = std::numeric_limits<double>::infinity();
      v.message = "dtype mismatch: output '" + ref.name + "' is " +
                  std::string(dtype_name(got.dtype())) + ", expected " +
                  std::string(dtype_name(ref.dtype));
    } else if (schema.name == "argmax") {
      judge_argmax(ctx, ref, got.to_f64(), v);
      v.passed = v.failing == 0;
    } else {
      const RefVec out = exact_values(got);
      const DType od = ref.dtype;
      const bool floating = dtype_info(od).is_floating;
      const double fp32_max = static_cast<double>(std::numeric_limits<float>::max());
      const bool in_floating = dtype_info(ctx.case_dtype).is_floating;
      const double in_max = dtype_info(ctx.case_dtype).max_finite;
      // Every element's error is written below (0 where it matches or is excused), so the
      // buffer is not zero-filled first; it comes from the reference heap, whose blocks are kept
      // from case to case.
      v.errors = ops::uninit_output(static_cast<std::int64_t>(out.size()));
      const double edge = floating ? inf_stand_in(od) : std::numeric_limits<double>::quiet_NaN();
      std::int64_t first_nonfinite = -1;
      std::string nonfinite_what;
      auto record = [&](std::size_t e, double err, double o, double r) {
        v.errors[e] = err;
        if (err > envelope) ++v.failing;
        if (err > v.max_error || (v.worst_index < 0 && err >= v.max_error)) {
          v.max_error = err;
          v.worst_index = static_cast<std::int64_t>(e);
          v.worst_out = o;
          v.worst_ref = r;
        }
      };
      const double* pre = rounded != nullptr ? (*rounded)[k].data() : nullptr;
      const ErrorScale scale(od, ctx.case_dtype, ref.exact);
      // Every element's error as if finite, in one vector pass (errors_of); the loop below takes
      // it for the finite ones and decides the others itself.
      if (floating)
        (k_errors_avx2 ? errors_of_avx2 : errors_of_base)(scale, out.data(), ref.value.data(),
                                                          ref.c_acc.empty() ? nullptr : ref.c_acc.data(),
                                                          ref.c_in.empty() ? nullptr : ref.c_in.data(),
                                                          v.errors.data(), out.size());
      for (std::size_t e = 0; e < out.size(); ++e) {
        const double r = pre != nullptr ? pre[e]
                         : floating     ? round_to(od, ref.value[e])
                                        : ref.value[e];
        const double o = out[e];
        const double ca = ref.c_acc.empty() ? 0.0 : ref.c_acc[e];
        const double ci = ref.c_in.empty() ? 0.0 : ref.c_in[e];
        const bool of = std::isfinite(o), rf = std::isfinite(r);
        double err = 0.0;
        if (of && rf && floating) {  // the common case: errors_of's value
          record(e, v.errors[e], o, ref.value[e]);
          continue;
        }
        v.errors[e] = 0.0;
        if (!of || !rf) {
          const bool same =
              (std::isnan(o) && std::isnan(r)) || (!std::isnan(o) && !std::isnan(r) && o == r);
          if (same) continue;
          // A non-finite result another correct formulation of the op gives for these inputs, or
          // the zero some formulations define where the reference is NaN (k_alt_zero).
          if (!ref.alt_nonfinite.empty() && alt_accepts(ref.alt_nonfinite[e], o)) {
            ++v.alternative;
            continue;
          }
          // A correct kernel's intermediates may overflow where the (finite) terms it accumulates
          // exceed float32's range, or where a magnitude that legitimately passes through the
          // input dtype (c_in: an unfused GEMM's product before its bias, a log-probability stored
          // in the input dtype) exceeds that dtype's range: the element cannot be judged,
          // whichever side is non-finite. (An infinite or NaN c_acc comes from a non-finite input,
          // whose propagation the reference states exactly: that is judged below, not excused.)
          if ((std::isfinite(ca) && 4.0 * ca >= fp32_max) ||
              (std::isfinite(ci) && std::isfinite(ca) && in_floating &&
               ci + k_u_acc * ca >= in_max)) {
            ++v.indeterminate;
            continue;
          }
          // One side +-Inf, the other finite: the infinity stands for +-(max + one ulp) of the
          // output dtype (inf_stand_in) and is judged as that number by the normalised error, so
          // a finite output at the dtype's max against an overflowing reference passes, and so
          // does an Inf output against a reference that rounds to the max.
          if (std::isfinite(edge) && ((std::isinf(o) && rf) || (std::isinf(r) && of))) {
            const double o_val = std::isinf(o) ? std::copysign(edge, o) : o;
            const double r_val = std::isinf(r) ? std::copysign(edge, r) : ref.value[e];
            err = scale(o_val, r_val, std::isfinite(ca) ? ca : 0.0, std::isfinite(ci) ? ci : 0.0);
            if (err <= envelope) {
              record(e, err, o, ref.value[e]);
              continue;
            }
          }
          ++v.nonfinite_mismatch;
          if (std::isnan(o) && rf) ++v.nan_where_finite;
          if (first_nonfinite < 0) {
            first_nonfinite = static_cast<std::int64_t>(e);
            nonfinite_what = std::string(of ? "finite " : (std::isnan(o) ? "NaN " : "Inf ")) +
                             "output (" + fmt(o) + ") where the reference is " +
                             (rf ? "finite (" : (std::isnan(r) ? "NaN (" : "Inf (")) + fmt(r) + ")";
          }
          err = std::numeric_limits<double>::infinity();
        } else {
          err = floating ? scale(o, ref.value[e], ca, ci)
                         : (o == r ? 0.0 : std::numeric_limits<double>::infinity());
        }
        record(e, err, o, ref.value[e]);
      }
      v.passed = v.failing == 0;
      // An op from PyTorch code marks what its reference cannot resolve with an infinite c_acc or c_in (a
      // comparison or an argmax within its own error decides the element); those are counted.
      if (derived)
        for (std::size_t e = 0; e < out.size(); ++e) {
          const bool open = (!ref.c_acc.empty() && std::isinf(ref.c_acc[e])) ||
                            (!ref.c_in.empty() && std::isinf(ref.c_in[e]));
          if (open && std::isfinite(ref.value[e])) ++v.unresolved;
        }
      if (v.nonfinite_mismatch > 0) {
        v.worst_index = first_nonfinite;
        v.worst_out = out[static_cast<std::size_t>(first_nonfinite)];
        v.worst_ref = ref.value[static_cast<std::size_t>(first_nonfinite)];
        v.message =
            std::to_string(v.nonfinite_mismatch) + " non-finite mismatch(es): " + nonfinite_what;
      } else if (!v.passed) {
        v.message = ref.exact
                        ? std::to_string(v.failing) + " of " + std::to_string(out.size()) +
                              " elements differ from the exact result (the op rounds nothing, so a "
                              "correct kernel matches bit for bit); first worst: got " +
                              fmt_exact(v.worst_out) + ", expected " + fmt_exact(v.worst_ref)
                        : std::to_string(v.failing) + " of " + std::to_string(out.size()) +
                              " elements over the envelope; worst error " + fmt(v.max_error) +
                              " > " + fmt(envelope) + " (got " + fmt(v.worst_out) + ", expected " +
                              fmt(v.worst_ref) + ")";
      }
    }
    if (v.worst_index >= 0) v.worst_coords = coords_of(v.worst_index, ref.shape);
    if (!v.passed) {
      if (verdict.passed)
        verdict.message = (reference.size() > 1 ? "output '" + ref.name + "': " : "") + v.message;
      verdict.passed = false;
    }
    verdict.max_error = std::max(verdict.max_error, v.max_error);
    verdict.outputs.push_back(std::move(v));
  }
  if (verdict.passed) {
    verdict.message = "max error " + fmt(verdict.max_error) + " <= envelope " + fmt(envelope);
    std::int64_t unresolved = 0;
    for (const auto& o : verdict.outputs) unresolved += o.unresolved;
    if (unresolved > 0) {
      verdict.inconclusive = true;
      verdict.message = "inconclusive: " + std::to_string(unresolved) +
                        " element(s) depend on a decision the reference cannot make within its own error "
                        "(a comparison, an argmax); the rest: " + verdict.message;
    }
  }
  return verdict;
}

Json Verdict::to_json() const {
  Json j;
  j["passed"] = passed;
  if (inconclusive) j["inconclusive"] = true;
  j["max_error"] = std::isfinite(max_error) ? Json(max_error) : Json("inf");
  j["envelope"] = envelope;
  j["message"] = message;
  j["outputs"] = Json::array();
  for (const auto& o : outputs) {
    Json oj;
    oj["name"] = o.name;
    oj["passed"] = o.passed;
    oj["max_error"] = std::isfinite(o.max_error) ? Json(o.max_error) : Json("inf");
    oj["worst_index"] = o.worst_index;
    oj["worst_coords"] = o.worst_coords;
    oj["worst_out"] = std::isfinite(o.worst_out) ? Json(o.worst_out) : Json(fmt(o.worst_out));
    oj["worst_ref"] = std::isfinite(o.worst_ref) ? Json(o.worst_ref) : Json(fmt(o.worst_ref));
    oj["failing"] = o.failing;
    oj["nonfinite_mismatch"] = o.nonfinite_mismatch;
    oj["nan_where_finite"] = o.nan_where_finite;
    oj["indeterminate"] = o.indeterminate;
    if (o.alternative) oj["alternative"] = o.alternative;
    if (o.unresolved) oj["unresolved"] = o.unresolved;
    oj["message"] = o.message;
    j["outputs"].push_back(oj);
  }
  return j;
}

}  // namespace gpuemu
