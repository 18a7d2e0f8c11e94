// Current failures (failure_index.hpp) placed in the workspace's files and worded for people: one
// error diagnostic per kernel, op and dtype, on the kernel's `def` line (a built-in kernel's: the
// [[op]] line of gpuemu.toml that registers it). Its message gives the op, dtype, seed, shapes,
// max error against the envelope and the diagnosis; its `data` carries the failure ids the code
// actions act on. The same placed groups feed the Failures view (`gpuemu/failures`).
#pragma once

#include "lsp/failure_index.hpp"
#include "lsp/lsp_types.hpp"
#include "lsp/workspace.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::lsp {

struct PlacedGroup {
  FailureGroup group;
  std::string path;            // "" when the failure has no place in a file
  std::optional<Range> range;  // on `path`
};

// Where each group belongs, from the workspace's current texts and its gpuemu.toml.
std::vector<PlacedGroup> place_groups(std::vector<FailureGroup> groups, const Workspace& ws);

// The diagnostic of one placed group (its range must be set).
Diagnostic failure_diagnostic(const PlacedGroup& g);
// Every placed group's diagnostic, by file path.
std::map<std::string, std::vector<Diagnostic>> failure_diagnostics(
    const std::vector<PlacedGroup>& groups);

// The one-line headline of a failure list item: "softmax bfloat16 seed S x=[191, 30]: max error
// 85.6 > envelope 2".
std::string failure_headline(const Json& failure);

// The Failures view: [{op, dtype, kernel, uri?, range?, failures: [{id, seed, dtype, shapes,
// max_error, envelope, message, bug_class, summary, created_ms}]}].
Json failures_view(const std::vector<PlacedGroup>& groups);

}  // namespace gpuemu::lsp
