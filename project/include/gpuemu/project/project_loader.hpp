// The gpuemu.toml of a command: found from the current directory up (or named), parsed by the
// project library (gpuemu/project/project_config.hpp), and the schemas of its torch ops read from
// Python through the script runner. Apart from the parser because this part links the script
// library; gpuemu._core links it too (python/src/project.cpp), so Python loads a project as the
// CLI does.
#pragma once

#include <gpuemu/project/project_config.hpp>

#include <string>

namespace gpuemu::cli {

// The project library's types, as the CLI's commands name them.
using project::CiPreset;
using project::CustomOp;
using project::ProjectConfig;
using project::ProjectOp;

// Reads `explicit_path` when given, else the first gpuemu.toml from the current directory up to
// the filesystem root (not_found when there is none), and resolves its torch ops. `runner`: the
// _script_runner.py that reads them ("" finds it as script kernels do; gpuemu._core passes its
// own package's).
Result<ProjectConfig> load_project_config(const std::string& explicit_path,
                                          const std::string& runner = "");

// Fills in the schema of every `torch_op =` custom op: runs its interpreter on
// `gpuemu.torch_ops schema FILE.py:NAME` (which imports the user's file), checks the schema as the
// daemon will, and checks the [[op]] dtypes against it. load_project_config calls it; the
// language server calls it before it runs ops (not on each keystroke). Errors name the
// [custom_ops.NAME] line and carry what Python printed.
Status resolve_torch_ops(ProjectConfig& config, const std::string& runner = "");

}  // namespace gpuemu::cli
