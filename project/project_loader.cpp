// The gpuemu.toml of a command (load_project_config: found, read, parsed) and the schemas of its
// torch ops (resolve_torch_ops), read from Python through the script runner. Apart from the
// parser (library gpuemu_project), so that the parser links without the script library (the
// gpuemu.toml fuzzer, tests/fuzz/run.sh).
#include "gpuemu/project/project_loader.hpp"

#include <gpuemu/engine/op_schema.hpp>
#include "gpuemu/script/script_process.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuemu::cli {

namespace fs = std::filesystem;

Result<ProjectConfig> load_project_config(const std::string& explicit_path,
                                          const std::string& runner) {
  fs::path path;
  std::error_code ec;
  if (!explicit_path.empty()) {
    path = fs::absolute(explicit_path, ec);
    if (!fs::is_regular_file(path))
      return make_error(ErrorCode::not_found, "no config file " + path.string());
  } else {
    for (fs::path dir = fs::current_path(ec);; dir = dir.parent_path()) {
      if (fs::is_regular_file(dir / "gpuemu.toml", ec)) {
        path = dir / "gpuemu.toml";
        break;
      }
      if (dir == dir.parent_path() || dir.empty())
        return make_error(ErrorCode::not_found,
                          "no gpuemu.toml here or in any parent directory (gpuemu init writes "
                          "one; --config FILE names another)");
    }
  }
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return make_error(ErrorCode::io_error, "cannot read " + path.string());
  GPUEMU_TRY(ProjectConfig config, project::parse_project_config(text.str(), path));
  GPUEMU_TRY_STATUS(resolve_torch_ops(config, runner));
  return config;
}

Status resolve_torch_ops(ProjectConfig& config, const std::string& runner) {
  for (auto& [name, op] : config.custom_ops) {
    if (!op.is_torch_op() || !op.schema_text.empty()) continue;
    const std::string where = config.file.string() + ":" + std::to_string(op.line) +
                              ": [custom_ops." + name + "] torch_op " + op.torch_op_script + ":" +
                              op.torch_op_name;
    // The runner in its torch_op mode imports the file and says the op's schema in its hello,
    // exactly as the daemon's reference process will load it.
    script::ScriptKernelSpec spec;
    spec.script = op.torch_op_script;
    spec.function = op.torch_op_name;
    spec.mode = "torch_op";
    spec.python = op.python;
    spec.runner = runner;
    spec.start_timeout_s = op.timeout_s;
    auto process = script::start_script_process(spec, "torch op");
    if (!process) return make_error(ErrorCode::invalid_argument, where + ": " + process.error().message);
    const Json hello = (*process)->hello();
    if (!hello.contains("schema") || !hello["schema"].is_string())
      return make_error(ErrorCode::invalid_argument,
                        where + ": the script runner sent no schema (is its gpuemu older than this CLI?)");
    const std::string text = hello["schema"].get<std::string>();
    auto parsed = parse_op_schema(text, "<torch_op " + name + ">");
    if (!parsed) return make_error(ErrorCode::invalid_argument, where + ": " + parsed.error().message);
    if (parsed->name != name)
      return make_error(ErrorCode::invalid_argument,
                        where + ": the op is named '" + parsed->name + "', the table '" + name +
                            "' (name them alike)");
    op.schema_text = text;
    op.schema_file = op.torch_op_script;
    if (hello.contains("envelope") && hello["envelope"].is_number() && hello["envelope"].get<double>() > 0)
      op.torch_op_envelope = hello["envelope"].get<double>();
    op.dtypes.clear();
    for (DType dt : parsed->dtypes) op.dtypes.emplace_back(dtype_name(dt));
    for (const ProjectOp& p : config.ops)
      if (p.op == name)
        if (const std::string bad = project::dtypes_not_allowed(p, op); !bad.empty())
          return make_error(ErrorCode::invalid_argument,
                            config.file.string() + ":" + std::to_string(p.line) + ": " + bad);
  }
  return {};
}

}  // namespace gpuemu::cli
