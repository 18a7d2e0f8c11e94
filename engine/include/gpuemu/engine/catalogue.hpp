// The op catalogue: every schema found on the search path, by name.
//
// Search path: the directories in GPUEMU_SCHEMA_PATH (colon-separated; each directory's *.json
// files, and those of an `ops/` subdirectory), then the built-in schemas (schemas/ops of the
// source tree, or $GPUEMU_BUILTIN_SCHEMAS). A user's schema with the name of a built-in one
// replaces it.
#pragma once

#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/op.hpp"
#include "gpuemu/engine/op_schema.hpp"
#include "gpuemu/engine/tensor.hpp"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuemu {

std::vector<std::string> default_schema_path();

class Catalogue {
 public:
  // Loads the default search path. Any malformed schema fails the load ("file:line: message").
  static Result<std::shared_ptr<const Catalogue>> load_default();
  static Result<std::shared_ptr<const Catalogue>> load(const std::vector<std::string>& dirs);

  const OpSchema* find(std::string_view name) const;
  // The schema, or an unknown_op error that lists close names.
  Result<const OpSchema*> get(std::string_view name) const;
  std::vector<const OpSchema*> all() const;  // sorted by name
  // A copy of this catalogue with `schema` added (a custom op of one request, docs/custom-ops.md).
  // A name this catalogue already has is a `conflict`: a custom op never shadows a catalogue op.
  Result<std::shared_ptr<const Catalogue>> with_op(OpSchema schema) const;

 private:
  std::map<std::string, OpSchema, std::less<>> m_ops;
};

// A RefContext for `schema` from the kernel's inputs (any layout) and the caller's attrs:
// checks every required input is there and no unknown one, every attr is known and of its type,
// and fills defaults. The case dtype is the dtype of the first case-dtype input unless given.
Result<RefContext> make_ref_context(const OpSchema& schema,
                                    const std::map<std::string, Tensor, std::less<>>& inputs,
                                    const AttrMap& attrs, std::optional<DType> case_dtype = {});
// The same from inputs already held as their exact values (RefArg: dtype, shape, row-major fp64),
// which it takes over: the path of callers that decode foreign memory themselves.
Result<RefContext> make_ref_context(const OpSchema& schema, std::map<std::string, RefArg, std::less<>> inputs,
                                    const AttrMap& attrs, std::optional<DType> case_dtype = {});

// Convenience: reference outputs of `op` for the given inputs and attrs.
Result<std::vector<RefOutput>> compute_reference(const OpSchema& schema,
                                                 const std::map<std::string, Tensor, std::less<>>& inputs,
                                                 const AttrMap& attrs);

}  // namespace gpuemu
