// The fuzzer: op-schema-aware case generation. A case is a pure function of (op schema, options,
// case seed): the same seed regenerates the same bytes on any machine.
#pragma once

#include "gpuemu/engine/catalogue.hpp"
#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/op.hpp"
#include "gpuemu/engine/op_schema.hpp"
#include "gpuemu/engine/precision.hpp"
#include "gpuemu/engine/tensor.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu {

enum class Distribution { regular, boundary, adversarial, special };
std::string_view distribution_name(Distribution d);
std::optional<Distribution> parse_distribution(std::string_view name);

// What the caller asks of the fuzzer. Everything not restricted here comes from the schema.
struct FuzzOptions {
  std::vector<DType> dtypes;                               // empty: every dtype the op allows
  Distribution distribution = Distribution::adversarial;
  std::map<std::string, std::vector<std::int64_t>, std::less<>> dims;  // dim name -> allowed sizes
  AttrMap attrs = Json::object();                          // pinned attrs
  std::vector<std::string> vary_attrs;                     // attrs to vary over their domain
  bool layouts = true;                                     // non-contiguous inputs allowed
  double element_budget_scale = 1.0;                       // scales the schema's per-case budget
  // Optional inputs pinned present (true) or absent (false), for kernels whose signature always
  // takes (or never takes) them; an optional input not named here is left out of 1 case in 4.
  std::map<std::string, bool, std::less<>> present;
  // Reduced-precision GEMM operands declared on purpose, per op or op family name
  // ({"matmul": "tf32"}; gpuemu/engine/precision.hpp). Empty: IEEE, and a TF32 fp32 GEMM fails.
  std::map<std::string, std::string, std::less<>> precision;
};

// The layout an input was materialised with.
struct InputLayout {
  std::string kind = "contiguous";  // contiguous | transposed | strided | offset | expanded
  std::int64_t param = 0;           // strided: step; offset: element offset; expanded: the dim
};

struct TestCase {
  std::string op;
  std::uint64_t seed = 0;           // the case seed (derive_seed(master, "case:<index>"))
  std::uint64_t master_seed = 0;
  std::int64_t index = 0;
  DType dtype = DType::float32;
  Distribution distribution = Distribution::adversarial;
  std::map<std::string, std::int64_t, std::less<>> dims;
  AttrMap attrs = Json::object();   // resolved: every attr
  std::map<std::string, Tensor, std::less<>> inputs;       // real views with real strides
  std::map<std::string, InputLayout, std::less<>> layouts;
  std::map<std::string, std::string, std::less<>> value_transforms;  // set by the minimizer
  PrecisionPolicy precision = PrecisionPolicy::ieee;       // what the options declare for this op

  // dtype, dims, attrs, layouts and a digest of each input (what `gpuemu cases` prints; without
  // `digests`, no digest: a client that never reads them need not pay a hash of every byte).
  Json describe(bool digests = true) const;
};

std::uint64_t case_seed(std::uint64_t master_seed, std::int64_t index);

// What the reference and the verdict of a generated case see: make_ref_context of its inputs,
// attrs and dtype, with its dims and the operand roundoff its precision policy allows.
Result<RefContext> case_ref_context(const OpSchema& schema, const TestCase& c);

class CaseGenerator {
 public:
  CaseGenerator(const OpSchema& schema, FuzzOptions options);
  // Checks the options against the schema: unknown dims, attrs, inputs and dtypes, dims below
  // their domain's minimum, attr values outside their domain, required inputs pinned absent,
  // precision policies the op cannot take, empty intersections.
  Status validate() const;
  // Case `index` of the run with `master_seed`.
  Result<TestCase> generate(std::uint64_t master_seed, std::int64_t index) const;
  // The case of a given case seed (the same bytes as the run's case that had this seed).
  Result<TestCase> generate_from_seed(std::uint64_t seed) const;
  // The case with some dims pinned (the minimizer) and optional value transforms
  // ("zeros", "ones", "small_ints") applied to inputs by name.
  Result<TestCase> generate_pinned(std::uint64_t seed,
                                   const std::map<std::string, std::int64_t, std::less<>>& dims,
                                   const std::map<std::string, std::string, std::less<>>& transforms,
                                   bool contiguous_only = false) const;

  const OpSchema& schema() const { return m_schema; }
  const FuzzOptions& options() const { return m_options; }

 private:
  const OpSchema& m_schema;
  FuzzOptions m_options;
};

}  // namespace gpuemu
