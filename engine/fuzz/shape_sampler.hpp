// Draws a case's dims from the schema's domains, weighted toward sizes that break tiled kernels.
#pragma once

#include "gpuemu/engine/fuzz.hpp"
#include "gpuemu/engine/rng.hpp"

namespace gpuemu {

// Resolves the value of a name used in an expression: a dim, or an (int / int-list) attr.
std::optional<std::int64_t> lookup_name(const std::map<std::string, std::int64_t, std::less<>>& dims,
                                        const Json& attrs, const std::string& name, int index);

// Evaluates an expression text against dims and attrs.
Result<std::int64_t> eval_expr(const std::string& text,
                               const std::map<std::string, std::int64_t, std::less<>>& dims,
                               const Json& attrs);

class ShapeSampler {
 public:
  ShapeSampler(const OpSchema& schema, const FuzzOptions& options)
      : m_schema(schema), m_options(options) {}
  // Samples every free dim, computes derived ones, enforces constraints and the element budget.
  // `pinned` dims are taken as given.
  Result<std::map<std::string, std::int64_t, std::less<>>> sample(
      std::uint64_t case_seed, const Json& attrs,
      const std::map<std::string, std::int64_t, std::less<>>& pinned) const;
  // Total input elements and the work estimate of a dim assignment.
  std::int64_t input_elements(const std::map<std::string, std::int64_t, std::less<>>& dims,
                              const Json& attrs) const;

 private:
  std::int64_t draw_dim(const DimDomain& d, Rng& rng) const;
  const OpSchema& m_schema;
  const FuzzOptions& m_options;
};

}  // namespace gpuemu
