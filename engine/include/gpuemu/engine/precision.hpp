// Reduced-precision arithmetic as a stated policy (docs/error-model.md, "Precision policies").
//
// Some kernels compute an fp32 op with reduced-precision GEMM operands on purpose: TF32 tensor
// cores (Triton's default tl.dot on fp32, torch.backends.cuda.matmul.allow_tf32), or the split
// bf16x3 / tf32x3 schemes. By default that is a bug for an fp32 op and fails. A caller who means
// it declares it per op or op family ({"matmul": "tf32"}); the error model then allows the
// operand rounding the policy implies, and nothing more.
#pragma once

#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/op_schema.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuemu {

enum class PrecisionPolicy { ieee, tf32, tf32x3, bf16x3 };

std::string_view precision_name(PrecisionPolicy p);
std::optional<PrecisionPolicy> parse_precision(std::string_view name);
// Every policy, with its one-line meaning (ops show, the CLI's help, docs).
std::vector<std::pair<PrecisionPolicy, std::string_view>> precision_policies();

// The relative error a policy may put on each GEMM operand (a, b; q, k; p, v): a product of two
// such operands is off by at most 2u + u^2 of its magnitude. 0 for ieee.
//   tf32:   10 stored mantissa bits; a truncating conversion (tensor cores fed raw fp32) loses
//           less than 2^-10, a rounding one 2^-11: u = 2^-10.
//   tf32x3: a = hi + lo in tf32 (22 bits kept: truncation < 2^-21 per operand), the lo*lo
//           product dropped (2^-22 of the product): per product < 1.25 * 2^-20, u = 2^-20.
//   bf16x3: a = hi + lo in bf16 (16 bits kept: < 2^-15 per operand), lo*lo dropped (2^-16):
//           per product < 1.25 * 2^-14, u = 2^-14.
double operand_roundoff(PrecisionPolicy p);

// Whether an op family has GEMM operands a policy can apply to (gemm, conv, attention).
bool family_takes_precision(std::string_view family);

// The policy `precision` (op or family name -> policy name) gives `schema`: its own name's entry,
// else its family's, else ieee. Errors: an unknown policy name, or a policy named for this op
// although its family has no GEMM operands.
Result<PrecisionPolicy> resolve_precision(const std::map<std::string, std::string, std::less<>>& precision,
                                          const OpSchema& schema);

// The operand roundoff a policy adds for inputs of `in_dtype`: 0 when the dtype is no wider than
// what the policy keeps (fp16 and bf16 operands are exact in tf32), else operand_roundoff(p).
double policy_operand_roundoff(PrecisionPolicy p, DType in_dtype);

// The smallest |x| of an `in_dtype` operand that a policy's rounding to nearest turns into Inf
// (infinity when none does: ieee, or an input dtype whose largest value fits). TF32 keeps fp32's
// exponent but only 10 fraction bits, so its largest finite value is (2 - 2^-10) * 2^127, and an
// fp32 operand from the midpoint (2 - 2^-11) * 2^127 = 3.40199e38 up (the top 0.02% of fp32's
// range) rounds to Inf; tf32x3's hi part is that rounding too, and bf16x3's hi part overflows from
// (2 - 2^-8) * 2^127. A kernel that rounds (cuBLAS and cuDNN on an H200 do: evidence/gpu/tf32.md) then
// returns Inf or NaN wherever such an operand takes part in a product; one that truncates does not.
double policy_operand_overflow(PrecisionPolicy p, DType in_dtype);

// The absolute error a policy's conversion may add to an `in_dtype` operand on top of its relative
// roundoff: nonzero where policy_operand_roundoff is. TF32 (and tf32x3's and bf16x3's hi parts) keep
// fp32's exponent range with fewer fraction bits, so below fp32's smallest normal the conversion's
// error is absolute, not relative: up to half the format's subnormal spacing when it rounds, less
// than the spacing when it truncates. The bound is that spacing: 2^-136 for tf32 and tf32x3, 2^-133
// for bf16x3. (The H200's cuBLAS and cuDNN TF32 round subnormals, flushing none: 2^-127, 1.5 * 2^-130
// and 2^-136 are kept exactly, 2^-149 becomes 0, evidence/gpu/probe_tf32_subnormal.py; so a
// product 2^-149 * 2^127 = 2^-22 of an exact value is lost: evidence/gpu/tf32.md.)
double policy_operand_floor(PrecisionPolicy p, DType in_dtype);

}  // namespace gpuemu
