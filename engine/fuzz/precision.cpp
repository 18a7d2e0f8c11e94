#include "gpuemu/engine/precision.hpp"

#include <cmath>
#include <limits>

namespace gpuemu {

std::string_view precision_name(PrecisionPolicy p) {
  switch (p) {
    case PrecisionPolicy::ieee: return "ieee";
    case PrecisionPolicy::tf32: return "tf32";
    case PrecisionPolicy::tf32x3: return "tf32x3";
    case PrecisionPolicy::bf16x3: return "bf16x3";
  }
  return "ieee";
}

std::vector<std::pair<PrecisionPolicy, std::string_view>> precision_policies() {
  return {
      {PrecisionPolicy::ieee, "IEEE fp32 operands (the default)"},
      {PrecisionPolicy::tf32, "TF32 tensor cores: operands keep 10 mantissa bits"},
      {PrecisionPolicy::tf32x3, "three TF32 products per product (hi/lo split): about fp32"},
      {PrecisionPolicy::bf16x3, "three bf16 products per product (hi/lo split): 16 bits"},
  };
}

std::optional<PrecisionPolicy> parse_precision(std::string_view name) {
  for (const auto& [p, _] : precision_policies())
    if (precision_name(p) == name) return p;
  return std::nullopt;
}

double operand_roundoff(PrecisionPolicy p) {
  switch (p) {
    case PrecisionPolicy::ieee: return 0.0;
    case PrecisionPolicy::tf32: return 0x1.0p-10;
    case PrecisionPolicy::tf32x3: return 0x1.0p-20;
    case PrecisionPolicy::bf16x3: return 0x1.0p-14;
  }
  return 0.0;
}

bool family_takes_precision(std::string_view family) {
  return family == "gemm" || family == "conv" || family == "attention";
}

namespace {

std::string policy_names() {
  std::string s;
  for (const auto& [p, _] : precision_policies()) s += (s.empty() ? "" : ", ") + std::string(precision_name(p));
  return s;
}

Result<PrecisionPolicy> parse_or_error(const std::string& key, const std::string& value) {
  auto p = parse_precision(value);
  if (!p)
    return make_error(ErrorCode::invalid_argument, "precision '" + key + "': unknown policy '" + value +
                                                       "' (policies: " + policy_names() + ")");
  return *p;
}

}  // namespace

Result<PrecisionPolicy> resolve_precision(const std::map<std::string, std::string, std::less<>>& precision,
                                          const OpSchema& schema) {
  auto own = precision.find(schema.name);
  if (own != precision.end()) {
    GPUEMU_TRY(PrecisionPolicy p, parse_or_error(own->first, own->second));
    if (p != PrecisionPolicy::ieee && !family_takes_precision(schema.family))
      return make_error(ErrorCode::invalid_argument,
                        "precision '" + schema.name + "': op '" + schema.name + "' (family " + schema.family +
                            ") has no GEMM operands; precision policies apply to the gemm, conv and "
                            "attention families");
    return p;
  }
  auto fam = precision.find(schema.family);
  if (fam != precision.end() && family_takes_precision(schema.family)) return parse_or_error(fam->first, fam->second);
  return PrecisionPolicy::ieee;
}

double policy_operand_roundoff(PrecisionPolicy p, DType in_dtype) {
  const double u = operand_roundoff(p);
  const auto& info = dtype_info(in_dtype);
  if (!info.is_floating) return 0.0;
  // Exact conversion when the operand has no more mantissa bits than the policy keeps.
  return info.unit_roundoff >= u / 2 ? 0.0 : u;
}

double policy_operand_floor(PrecisionPolicy p, DType in_dtype) {
  if (policy_operand_roundoff(p, in_dtype) == 0.0) return 0.0;
  // The subnormal spacing of the format the operand is converted to (its hi part's for the split
  // schemes, whose lo part then holds the rest on the same grid): TF32 2^-126 * 2^-10, bf16 2^-126 * 2^-7.
  return p == PrecisionPolicy::bf16x3 ? 0x1.0p-133 : 0x1.0p-136;
}

double policy_operand_overflow(PrecisionPolicy p, DType in_dtype) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double threshold = inf;
  switch (p) {
    case PrecisionPolicy::ieee: return inf;
    case PrecisionPolicy::tf32:
    case PrecisionPolicy::tf32x3: threshold = std::ldexp(2.0 - std::ldexp(1.0, -11), 127); break;
    case PrecisionPolicy::bf16x3: threshold = std::ldexp(2.0 - std::ldexp(1.0, -8), 127); break;
  }
  const auto& info = dtype_info(in_dtype);
  return info.is_floating && info.max_finite >= threshold ? threshold : inf;
}

}  // namespace gpuemu
