// Built-in op implementations: the fp64 reference of each op, and the correct low-precision
// "control" implementations used to calibrate tolerances (how production kernels really compute:
// inputs in the case dtype, fp32 accumulation in tiles, output rounded once).
#pragma once

#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/op_schema.hpp"
#include "gpuemu/engine/tensor.hpp"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuemu {

// The tag that asks RefAllocator to leave a new element uninitialised (see RefVec).
struct RefNoInit {};

namespace detail {
// The heap RefAllocator draws from (engine/core/ref_heap.hpp): operator new for small blocks;
// a large block is a 2 MiB-aligned mapping with transparent huge pages, kept for reuse when freed
// (up to GPUEMU_REF_CACHE_MB), so repeated references skip the page faults of fresh memory.
void* ref_allocate(std::size_t bytes);
void ref_deallocate(void* p, std::size_t bytes) noexcept;
// Unmaps the blocks the heap keeps for reuse (an idle daemon gives its memory back).
void ref_release_cache() noexcept;
}  // namespace detail

// The reference heap (detail::ref_allocate), plus one way to make elements without writing them.
// Everything a std::vector normally does is unchanged: `RefVec v(n)`, resize and the like
// value-initialise (zeros, as std::allocator), copies copy. Only an element constructed from the
// RefNoInit tag is default-initialised, i.e. left unwritten — what ops::uninit_output() asks for,
// so that a large reference output is not zero-filled on one thread before the parallel loop that
// computes it writes it again. Stateless: every instance is interchangeable.
template <class T>
struct RefAllocator {
  using value_type = T;
  using is_always_equal = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  RefAllocator() noexcept = default;
  template <class U>
  constexpr RefAllocator(const RefAllocator<U>&) noexcept {}

  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(detail::ref_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { detail::ref_deallocate(p, n * sizeof(T)); }

  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);  // U() for no args: zero
  }
  template <class U>
  void construct(U* p, RefNoInit) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-init: no write for a double
  }

  template <class U>
  friend bool operator==(const RefAllocator&, const RefAllocator<U>&) noexcept {
    return true;
  }
};

// The vector a reference output is returned in (RefOutput). Made like any std::vector it holds
// zeros; made by ops::uninit_output() its elements are unwritten and every one of them must be
// written by the caller before it is read.
using RefVec = std::vector<double, RefAllocator<double>>;

// The tensor's exact values as doubles, row-major, in a RefVec that was never zero-filled (from the
// reference heap, so that a fuzz run's per-case buffers reuse memory instead of faulting in pages).
RefVec exact_values(const Tensor& t);

// One input as a reference sees it: the exact values the kernel received, as doubles, contiguous
// row-major (whatever layout the kernel's tensor had).
struct RefArg {
  DType dtype = DType::float32;
  Shape shape;
  RefVec data;  // the exact values, row-major (the reference heap: no page faults per case)
  std::int64_t size(std::int64_t d) const {
    return shape.at(static_cast<std::size_t>(d < 0 ? d + static_cast<std::int64_t>(shape.size()) : d));
  }
  std::int64_t numel() const { return shape_numel(shape); }
};

// Everything a reference or a control gets: inputs by schema name, attrs resolved (every attr
// present, defaults filled in), the case dims and dtype.
class RefContext {
 public:
  DType case_dtype = DType::float32;
  std::map<std::string, RefArg, std::less<>> inputs;
  AttrMap attrs = Json::object();
  std::map<std::string, std::int64_t, std::less<>> dims;
  const OpSchema* schema = nullptr;
  // The relative error a declared precision policy allows on each GEMM operand (0: IEEE fp32;
  // gpuemu/engine/precision.hpp). The gemm, conv and attention references widen c_acc by what that
  // operand rounding can move the result, and nothing else reads it.
  double operand_roundoff = 0.0;
  // The smallest operand magnitude the declared policy's rounding turns into Inf
  // (policy_operand_overflow; infinity under IEEE): the gemm and conv references let an output
  // that such an operand takes part in be non-finite (alt_nonfinite).
  double operand_overflow = std::numeric_limits<double>::infinity();
  // The absolute error the declared policy's rounding may add to an operand below the input
  // dtype's smallest normal (policy_operand_floor; 0 under IEEE): the gemm and conv references
  // widen c_acc by what it can move each dot product.
  double operand_floor = 0.0;
  // The caller wants the fp64 value alone (gpuemu.reference): a reference may then skip the work
  // that only the error bounds need and leave c_acc, c_in and alt_nonfinite empty. Verdicts,
  // calibration and minimizing never set it.
  bool value_only = false;

  bool has_input(std::string_view name) const { return inputs.find(name) != inputs.end(); }
  const RefArg& input(std::string_view name) const;  // throws GpuemuException when absent
  bool attr_is_null(std::string_view name) const;
  bool attr_bool(std::string_view name) const;
  std::int64_t attr_int(std::string_view name) const;
  double attr_float(std::string_view name) const;
  std::string attr_string(std::string_view name) const;
  // An int or a list of ints, as `n` ints (an int is repeated): conv's stride=2 or stride=[2, 1].
  std::vector<std::int64_t> attr_ints(std::string_view name, std::size_t n) const;
  // The dtype of output `index` under the schema's rule.
  DType output_dtype(std::size_t index = 0) const;
};


// One reference output, with the per-element condition terms the error model normalises by
// (docs/error-model.md): err = |out - ref| / (u_out*|ref| + u_acc*c_acc + u_in*c_in + tiny_out).
struct RefOutput {
  std::string name;
  DType dtype = DType::float32;   // the dtype the kernel must return
  Shape shape;
  RefVec value;                   // the fp64 reference, row-major
  RefVec c_acc;                   // magnitude accumulated in fp32 (empty means zeros)
  RefVec c_in;                    // magnitude that legitimately passes through input-dtype rounding
  // Non-finite results (and k_alt_zero) a correct kernel may return instead of the reference's, per
  // element (empty means none), as k_alt_* bits: where legitimate formulations disagree on special values (e.g.
  // batch_norm's fused x·α + β gives NaN for an infinite weight where the direct (x − μ)·σ⁻¹·w
  // gives ±Inf; rope's ±Inf·sin φ where fp32 cannot resolve the sign of sin φ).
  std::vector<std::uint8_t> alt_nonfinite;
  // An exact op (a gather, a max, relu): the reference is one of the inputs, exactly representable
  // in the output dtype, and a correct kernel computes nothing that rounds, so the bound is zero
  // (c_acc and c_in are ignored) and any difference fails. Only the floor near the subnormal range
  // stays: a kernel built with flush-to-zero may return 0 for a subnormal result.
  bool exact = false;
};

inline constexpr std::uint8_t k_alt_nan = 1, k_alt_pos_inf = 2, k_alt_neg_inf = 4,
                              k_alt_any_nonfinite = 7;
// A zero a correct kernel may return where the reference is NaN because the op is undefined there
// (attention over a row whose every score is -Inf: softmax's 0/0, which PyTorch's SDPA backends and
// FlashAttention define as a zero output).
inline constexpr std::uint8_t k_alt_zero = 8;
// The k_alt_* bit of a non-finite value (0 for a finite one).
inline std::uint8_t alt_bit_of(double v) {
  if (std::isnan(v)) return k_alt_nan;
  if (std::isinf(v)) return v > 0 ? k_alt_pos_inf : k_alt_neg_inf;
  return 0;
}

// Whether `out` is one of the alternatives `bits` lists (a non-finite value's bit, or a zero).
inline bool alt_accepts(std::uint8_t bits, double out) {
  return (bits & alt_bit_of(out)) != 0 || (out == 0.0 && (bits & k_alt_zero) != 0);
}

// A reference computed outside the built-in table: a custom op's Python reference run by the
// daemon (gpuemu/script/script_reference.hpp). Bound to a schema as OpSchema::external_reference.
struct ExternalReference {
  virtual ~ExternalReference() = default;
  virtual Result<std::vector<RefOutput>> run(const RefContext& ctx) const = 0;
};

using ReferenceFn = std::function<Result<std::vector<RefOutput>>(const RefContext&)>;
// A kernel emulated on the CPU: returns each output's values, already rounded to its dtype.
using KernelFn = std::function<Result<std::vector<std::vector<double>>>(const RefContext&)>;

struct NamedKernel {
  std::string name;         // "fp32_tiled", "p_rounded", ...
  std::string description;
  KernelFn run;
};

struct BuiltinOp {
  std::string name;                  // matches the schema's "builtin:<name>"
  ReferenceFn reference;
  std::vector<NamedKernel> controls; // correct low-precision implementations (calibration)
  std::vector<NamedKernel> buggy;    // known-buggy implementations (demo, self-tests)
};

class BuiltinRegistry {
 public:
  static BuiltinRegistry& instance();  // filled by register_all_builtin_ops() on first use
  void add(BuiltinOp op);
  const BuiltinOp* find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, BuiltinOp, std::less<>> m_ops;
};

// Runs the schema's reference on `ctx`: its external_reference when bound, else the built-in one
// its `reference` names ("script:" references need the daemon to bind them).
Result<std::vector<RefOutput>> run_reference(const OpSchema& schema, const RefContext& ctx);

// The shape the schema gives output `index` of the case in `ctx`: "like:<input>" is that input's
// shape, a list of expressions is evaluated over the case's dims and attrs. None where the schema
// does not fix it (a description, an input that takes any number of leading dims, a name the
// case does not bind).
std::optional<Shape> expected_output_shape(const OpSchema& schema, const RefContext& ctx, std::size_t index);

// An error naming `who` (the reference) when one of `outputs` has another shape than the schema
// gives it: a reference's output is never taken as the truth a correct kernel must match.
Status check_reference_shapes(const OpSchema& schema, const RefContext& ctx,
                              const std::vector<RefOutput>& outputs, const std::string& who);

}  // namespace gpuemu
