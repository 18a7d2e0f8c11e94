// gpuemu.toml: a project's registered ops, defaults, lint policy and CI presets (docs/ci.md).
//
//   [project]  name
//   [defaults] iterations, strategy, dtypes, seed, framework, timeout_s
//   [[op]]     name, script = "FILE.py:FUNC" | kernel = "builtin", framework, dtypes, iterations,
//              strategy, seed, timeout_s, python, dims = {N = [64, 129]}, attrs = {dim = -1},
//              vary_attrs, layouts, envelope = X | {float16 = X, ...},
//              with = ["weight"], without = ["bias"] (optional inputs pinned),
//              precision = "tf32" | {gemm = "tf32", ...} (declared reduced-precision operands)
//   [custom_ops.NAME]  schema = "op.json", reference = "FILE.py:FUNC", control = "FILE.py:FUNC",
//              python, timeout_s (docs/custom-ops.md)
//   [lint]     the lint policy (gpuemu/lint/policy.hpp validates it)
//   [ci]       preset, minimize, lint_paths, lint_baseline, lint_baseline_tag,
//              [ci.presets.NAME] scale, min_iterations
//
// Every unknown key is an error naming the file and line (`tolerance` too, pointing at `envelope`).
//
// The one reader of the file (library gpuemu_project): the CLI, the language server, the fuzz_toml
// target and the Python module (gpuemu._core, python/src/project.cpp) all parse it here. Finding
// the file and inferring the schemas of torch ops (which runs Python) is cli/project_loader.hpp's.
#pragma once

#include <gpuemu/base/error.hpp>
#include <gpuemu/engine/fuzz.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpuemu::project {

// One [[op]] table, with [defaults] already applied.
struct ProjectOp {
  std::string op;        // catalogue op name
  int line = 0;          // where its [[op]] table starts in the file
  std::string script;    // absolute path of the script ("" for a builtin kernel)
  std::string function;  // the script's function
  std::string builtin;   // a built-in kernel name ("" for a script)
  std::string framework = "numpy";
  std::string python;  // interpreter for the script ("" = the daemon's default)
  double timeout_s = 60.0;
  std::vector<std::string> dtypes;  // empty: every dtype the op allows
  std::int64_t iterations = 100;
  std::string strategy = "adversarial";
  std::optional<std::uint64_t> seed;
  std::map<std::string, std::vector<std::int64_t>> dims;
  nlohmann::json attrs = nlohmann::json::object();
  std::vector<std::string> vary_attrs;
  bool layouts = true;
  std::map<std::string, bool> present;            // with = [...] true, without = [...] false
  std::map<std::string, std::string> precision;   // op or family -> policy
  // Envelope overrides: dtype -> envelope, "*" for every dtype (the daemon's `envelope` param).
  std::map<std::string, double> envelope;

  // The kernel spec of the daemon's `fuzz` request.
  nlohmann::json kernel_spec() const;
  // A label: "softmax.py:softmax" or "builtin:tail_leak".
  std::string kernel_label() const;
  // FuzzOptions restricted to one dtype ("" keeps the op's dtypes list).
  FuzzOptions fuzz_options(const std::string& dtype) const;
  // The `gpuemu fuzz` command line that replays a case of this entry (the run's `repro_prefix`;
  // the daemon appends --seed/--case), with one --dtype per entry of `run_dtypes`.
  std::string repro_prefix(const std::vector<std::string>& run_dtypes) const;
};

// One [custom_ops.NAME] table: a user's op (its schema file, parsed and checked on load) and its
// float64 reference, optionally a control to calibrate against (docs/custom-ops.md).
struct CustomOp {
  std::string name;
  int line = 0;
  std::string schema_file;  // absolute
  std::string schema_text;  // sent to the daemon, which parses it again (file:line errors)
  std::vector<std::string> dtypes;  // the schema's
  std::string reference_script, reference_function;  // "" when the schema's script: is used
  std::string control_script, control_function;      // "" when none
  std::string python;
  double timeout_s = 60.0;
  // `torch_op = "FILE.py:NAME"` (docs/torch-ops.md): a gpuemu.torch_op, in place of a schema and a
  // reference. Its schema is the one the op infers, read by resolve_torch_ops (schema_text and
  // dtypes stay empty until then).
  std::string torch_op_script, torch_op_name;
  double torch_op_envelope = 2.0;  // the op's `envelope` (sent in spec(): no term is calibrated)
  bool is_torch_op() const { return !torch_op_script.empty(); }

  // The daemon's `custom_op` param.
  nlohmann::json spec() const;
  // The control as a kernel spec ({kind: script, ...}); null when there is none.
  nlohmann::json control_spec() const;
};

struct CiPreset {
  double scale = 1.0;
  std::int64_t min_iterations = 1;
};

struct ProjectConfig {
  std::filesystem::path file;  // absolute path of the gpuemu.toml read
  std::string text;            // its text
  std::string name;
  std::vector<ProjectOp> ops;
  std::map<std::string, CustomOp> custom_ops;
  bool has_lint = false;  // a [lint] table
  int lint_line = 0;
  // [ci].lint_paths (absolute): `gpuemu ci` runs `gpuemu lint` on them with the [lint] policy,
  // against [ci].lint_baseline (a file) or [ci].lint_baseline_tag (stored in the daemon).
  std::vector<std::string> lint_paths;
  std::string lint_baseline, lint_baseline_tag;
  const CustomOp* custom_op(const std::string& op) const {
    auto it = custom_ops.find(op);
    return it == custom_ops.end() ? nullptr : &it->second;
  }
  std::string ci_preset = "default";
  bool ci_minimize = false;
  std::map<std::string, CiPreset> presets;  // "default", "quick", "thorough" and the user's
};

// Parses TOML text; `file` names it in messages and anchors relative script paths. Errors are
// invalid_argument with "FILE:LINE: ...".
Result<ProjectConfig> parse_project_config(const std::string& text,
                                           const std::filesystem::path& file);
// What an [[op]] asks of its custom op's dtypes (and envelopes) that the op does not allow: a
// message, "" when nothing.
std::string dtypes_not_allowed(const ProjectOp& op, const CustomOp& custom);

// The commented example `gpuemu init` writes.
std::string example_project_config();

}  // namespace gpuemu::project
