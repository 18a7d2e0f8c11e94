// The flags that choose which cases an op's run draws, shared by `gpuemu fuzz` and `gpuemu cases`:
// --dtype, --strategy, --dims, --attr, --vary-attr, --no-layouts, --with, --without, --precision.
// One struct reads them, turns them into FuzzOptions and writes them back as a replay command's
// flags, so a flag is added in one place.
#pragma once

#include <CLI/CLI.hpp>

#include <gpuemu/engine/fuzz.hpp>

#include <string>
#include <vector>

namespace gpuemu::cli {

struct CaseFlags {
  std::vector<std::string> dtypes, dims, attrs, vary;
  std::string strategy = "adversarial";
  bool no_layouts = false;
  std::vector<std::string> with, without;  // optional inputs pinned present / absent
  std::vector<std::string> precision;      // POLICY (for the op) or OP_OR_FAMILY=POLICY

  void add_to(CLI::App& cmd);
  // The options for `op` (a bare --precision POLICY names it); throws GpuemuException on a value
  // that cannot be parsed. Checking against the op's schema is CaseGenerator::validate's job.
  FuzzOptions options(const std::string& op) const;
  // " --dtype bfloat16 --with weight ...": the flags that replay the same selection.
  std::string repro_flags() const;
};

}  // namespace gpuemu::cli
