// Op schemas: the description of an op that drives fuzzing, the reference oracle and the error
// model. One JSON file per op under schemas/ops/ (format: schemas/op.schema.json, documented in
// docs/schemas.md). Users add ops by dropping files on GPUEMU_SCHEMA_PATH.
#pragma once

#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/base/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu {

using Json = nlohmann::json;
// Attribute values are JSON values: null, bool, integer, float, string or an array of integers.
using AttrMap = Json;  // always an object

// The domain a dim is drawn from. Free dims are sampled; derived dims (expr) are computed.
struct DimDomain {
  std::string name;
  std::int64_t min = 1;
  std::int64_t max = 1;
  std::vector<std::int64_t> values;  // explicit choices (non-empty: only these)
  std::string role;                  // batch | reduction | sequence | feature | head | channel |
                                     // spatial | vocab | kernel (weights the sampler)
  std::string expr;                  // derived dim: an integer expression over dims and attrs
};

enum class InputDtypeRule { case_dtype, fixed };

// When the fuzzer gives an optional input (schema key "presence"; a `present=` pin overrides each):
//   drawn                 absent in one case of 4 (a bias, a weight)
//   when_pinned           absent unless pinned present: a mode of the op that the caller asks for
//                         (softmax_backward's forward logits x, for autograd's backward=True)
//   unless_pinned_absent  present unless pinned absent: an input a caller may drop
//                         (flash_attention_backward's saved out and lse)
// The draw of "present:<name>" is made either way, so the mode changes no other draw of a case.
enum class InputPresence { drawn, when_pinned, unless_pinned_absent };

struct InputSpec {
  std::string name;
  std::vector<std::string> shape;   // one integer expression per dim (usually a dim name)
  InputDtypeRule dtype_rule = InputDtypeRule::case_dtype;
  std::vector<DType> dtypes;        // fixed: the allowed dtypes (the first is the default)
  std::string domain = "real";      // real | positive | nonnegative | probabilities | unit |
                                    // indices:<expr> | lengths:<expr> | targets:<expr> | scale
  bool optional = false;            // may be absent (e.g. bias); the fuzzer sometimes omits it
  InputPresence presence = InputPresence::drawn;  // when the fuzzer omits it (optional only)
  std::vector<std::string> layouts; // non-contiguous layouts it may take: transposed, strided,
                                    // offset, expanded
  // The adversarial value recipe, where the family's does not fit this input (schema key
  // "values"): logits | norm | accumulated | wide | regular; empty: the family's. Ops inferred
  // from PyTorch code (gpuemu.torch_op) set it from the ops each input feeds.
  std::string values;
  // PyTorch's (*, N): the first shape entry (a dim name) stands for any number of leading dims,
  // bound to their product (1 when there are none). The fuzzer draws the schema's rank; a caller's
  // own tensors (gpuemu.reference, run_op) may have any rank >= shape.size() - 1.
  bool any_leading_dims = false;
  // A shape that depends on a string attr (schema key "shape_when": {"<attr>": {"<value>": [...]}}):
  // where attr `shape_attr` has one of those values the input takes that shape, else `shape`
  // (cross_entropy_backward's grad_out: [] for reduction 'mean' or 'sum', [N] for 'none').
  std::string shape_attr;
  std::map<std::string, std::vector<std::string>, std::less<>> shape_when;
  std::string description;

  // The shape for attrs `attrs` (resolved: OpSchema::resolve_attrs), `shape` when no value picks one.
  const std::vector<std::string>& shape_for(const AttrMap& attrs) const;
  // Every shape it may take: `shape`, then the shape_when ones (checks over all of them).
  std::vector<const std::vector<std::string>*> all_shapes() const;
};

struct AttrSpec {
  std::string name;
  std::string type;                 // bool | int | float | string | ints
  bool nullable = false;
  Json default_value;               // PyTorch's default
  std::vector<Json> values;         // the domain as choices (may be empty)
  std::optional<double> min, max;   // the domain as a range (int / float)
  bool semantic = true;             // semantic attrs vary only when the caller asks
  std::string dim_of;               // int attr naming a dim of this input: in [-rank, rank)
  std::string description;
};

struct OutputSpec {
  std::string name;
  Json shape;                       // "like:<input>" or a list of expressions or a description
  std::string dtype = "case";       // case | like:<input> | attr:<name> | a dtype name
};

struct ExternalReference;  // gpuemu/engine/op.hpp

struct OpSchema {
  std::string name;
  int version = 1;
  std::string summary;
  std::string family;               // elementwise | binary | reduction | scan | softmax | norm |
                                    // gemm | attention | rope | conv | loss | gather | quant
  std::vector<DType> dtypes;        // case dtypes the op allows
  std::vector<DimDomain> dims;      // in sampling order
  std::vector<InputSpec> inputs;
  std::vector<AttrSpec> attrs;
  std::vector<OutputSpec> outputs;
  std::vector<std::string> reduced_dims;
  std::vector<std::string> constraints;  // boolean expressions over dims and attrs
  std::int64_t max_elements = 1 << 20;   // per-case budget over all inputs
  std::int64_t max_work = 1LL << 28;     // per-case budget of reference multiply-adds
  std::string work;                      // the multiply-adds of a case, as an expression ("M*N*K")
  std::string reference;            // "builtin:<name>" or "script:<file>.py:<func>"
  std::string source_file;          // where it was loaded from
  Json raw;                         // the document as loaded
  // A reference bound at run time instead of `reference` (the daemon binds a custom op's Python
  // reference here, docs/custom-ops.md); run_reference calls it. Null for schemas loaded from files.
  std::shared_ptr<const ExternalReference> external_reference;

  const DimDomain* find_dim(std::string_view n) const;
  const InputSpec* find_input(std::string_view n) const;
  const AttrSpec* find_attr(std::string_view n) const;
  // Every attr at its default, overridden by `given` (which must only name known attrs).
  Result<AttrMap> resolve_attrs(const AttrMap& given) const;
  // Checks each dim_of attr of resolved attrs `given` against the rank of the input it names;
  // rank_of gives that rank, or a negative number where the input is absent (nothing to check).
  Status check_dim_attrs(const AttrMap& given,
                         const std::function<std::int64_t(const InputSpec&)>& rank_of) const;
};

// Whether d names a dim of a rank-`rank` tensor, as PyTorch counts: -rank <= d < rank (a 0-d
// tensor takes 0 and -1).
inline bool dim_in_rank(std::int64_t d, std::int64_t rank) {
  const std::int64_t r = rank < 1 ? 1 : rank;
  return d >= -r && d < r;
}

// Parses and validates one schema document. `file` names it in error messages ("file:line: ...").
Result<OpSchema> parse_op_schema(const std::string& text, const std::string& file);
Result<OpSchema> load_op_schema_file(const std::string& path);

}  // namespace gpuemu
