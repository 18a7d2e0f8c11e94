// gpuemu.toml for Python: the CLI's own reader (gpuemu/project/project_config.hpp, library
// gpuemu_project) and loader (cli/project_loader.hpp), so that Client.run_registered reads the file
// with the same rules and the same messages ("FILE:LINE: ...") as `gpuemu ci`. The structures are
// bound read-only; JSON-valued parts (attrs, kernel specs, fuzz options) come back as dicts.
#include "convert.hpp"
#include "register.hpp"

#include "gpuemu/project/project_loader.hpp"

#include <gpuemu/project/project_config.hpp>
#include <gpuemu/protocol/protocol.hpp>

#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace gpuemu::python {
namespace {

template <typename T>
T value_or_raise(Result<T> r) {
  if (!r) throw_error(r.error().code, r.error().message);
  return std::move(*r);
}

void register_project_op(py::module_& m) {
  using project::ProjectOp;
  py::class_<ProjectOp>(m, "ProjectOp", "One [[op]] of gpuemu.toml, with [defaults] applied")
      .def_readonly("op", &ProjectOp::op)
      .def_readonly("line", &ProjectOp::line)
      .def_readonly("script", &ProjectOp::script)
      .def_readonly("function", &ProjectOp::function)
      .def_readonly("builtin", &ProjectOp::builtin)
      .def_readonly("framework", &ProjectOp::framework)
      .def_readonly("python", &ProjectOp::python)
      .def_readonly("timeout_s", &ProjectOp::timeout_s)
      .def_readonly("dtypes", &ProjectOp::dtypes)
      .def_readonly("iterations", &ProjectOp::iterations)
      .def_readonly("strategy", &ProjectOp::strategy)
      .def_readonly("seed", &ProjectOp::seed)
      .def_readonly("dims", &ProjectOp::dims)
      .def_property_readonly("attrs", [](const ProjectOp& o) { return py_from_json(o.attrs); })
      .def_readonly("vary_attrs", &ProjectOp::vary_attrs)
      .def_readonly("layouts", &ProjectOp::layouts)
      .def_readonly("present", &ProjectOp::present)
      .def_readonly("precision", &ProjectOp::precision)
      .def_readonly("envelope", &ProjectOp::envelope)
      .def_property_readonly("label", &ProjectOp::kernel_label,
                             "\"softmax.py:softmax\" or \"builtin:tail_leak\"")
      .def("kernel_spec", [](const ProjectOp& o) { return py_from_json(o.kernel_spec()); },
           "The daemon's kernel spec (builtin or script)")
      .def(
          "fuzz_options",
          [](const ProjectOp& o, const std::string& dtype) {
            return py_from_json(protocol::options_to_json(o.fuzz_options(dtype)));
          },
          py::arg("dtype") = "", "The fuzz options on the wire (one dtype, or the entry's list)")
      .def("repro_prefix", &ProjectOp::repro_prefix, py::arg("dtypes"),
           "The `gpuemu fuzz` command line that replays a case (the daemon adds --seed/--case)");
}

void register_custom_op(py::module_& m) {
  using project::CustomOp;
  py::class_<CustomOp>(m, "CustomOp", "One [custom_ops.NAME] of gpuemu.toml")
      .def_readonly("name", &CustomOp::name)
      .def_readonly("line", &CustomOp::line)
      .def_readonly("schema_file", &CustomOp::schema_file)
      .def_readonly("schema_text", &CustomOp::schema_text)
      .def_readonly("dtypes", &CustomOp::dtypes)
      .def_readonly("reference_script", &CustomOp::reference_script)
      .def_readonly("reference_function", &CustomOp::reference_function)
      .def_readonly("control_script", &CustomOp::control_script)
      .def_readonly("control_function", &CustomOp::control_function)
      .def_readonly("python", &CustomOp::python)
      .def_readonly("timeout_s", &CustomOp::timeout_s)
      .def_readonly("torch_op_script", &CustomOp::torch_op_script)
      .def_readonly("torch_op_name", &CustomOp::torch_op_name)
      .def_property_readonly("is_torch_op", &CustomOp::is_torch_op)
      .def("spec", [](const CustomOp& c) { return py_from_json(c.spec()); },
           "The daemon's `custom_op` param")
      .def("control_spec", [](const CustomOp& c) { return py_from_json(c.control_spec()); },
           "The control as a kernel spec; None when there is none");
}

void register_config(py::module_& m) {
  using project::CiPreset;
  using project::ProjectConfig;
  py::class_<CiPreset>(m, "CiPreset", "One [ci.presets.NAME] (or a built-in preset)")
      .def_readonly("scale", &CiPreset::scale)
      .def_readonly("min_iterations", &CiPreset::min_iterations);
  py::class_<ProjectConfig>(m, "ProjectConfig", "A gpuemu.toml as the CLI reads it (docs/ci.md)")
      .def_property_readonly("file", [](const ProjectConfig& c) { return c.file.string(); })
      .def_readonly("text", &ProjectConfig::text)
      .def_readonly("name", &ProjectConfig::name)
      .def_readonly("ops", &ProjectConfig::ops)
      .def_readonly("custom_ops", &ProjectConfig::custom_ops)
      .def_readonly("has_lint", &ProjectConfig::has_lint)
      .def_readonly("lint_line", &ProjectConfig::lint_line)
      .def_readonly("lint_paths", &ProjectConfig::lint_paths)
      .def_readonly("lint_baseline", &ProjectConfig::lint_baseline)
      .def_readonly("lint_baseline_tag", &ProjectConfig::lint_baseline_tag)
      .def_readonly("ci_preset", &ProjectConfig::ci_preset)
      .def_readonly("ci_minimize", &ProjectConfig::ci_minimize)
      .def_readonly("presets", &ProjectConfig::presets)
      .def(
          "custom_op",
          [](const ProjectConfig& c, const std::string& op) -> py::object {
            const project::CustomOp* custom = c.custom_op(op);
            return custom ? py::cast(*custom) : py::none();
          },
          py::arg("op"), "The [custom_ops.NAME] of that op; None when it is a catalogue op");
}

}  // namespace

void register_project(py::module_& m) {
  register_project_op(m);
  register_custom_op(m);
  register_config(m);
  m.def(
      "parse_project_config",
      [](const std::string& text, const std::string& file) {
        return value_or_raise(project::parse_project_config(text, file));
      },
      py::arg("text"), py::arg("file"),
      "Parses gpuemu.toml text; `file` names it in messages and anchors relative paths. Errors are "
      "ValidationError \"FILE:LINE: ...\", as `gpuemu ci` prints them. Torch ops stay unresolved.");
  m.def(
      "load_project_config",
      [](const std::string& path, const std::string& runner) {
        py::gil_scoped_release release;  // resolving torch ops runs Python in a child process
        return value_or_raise(cli::load_project_config(path, runner));
      },
      py::arg("path") = "", py::arg("runner") = "",
      "Reads `path` (else the first gpuemu.toml from the current directory up), parses it and "
      "reads the schemas of its torch ops with `runner` (a _script_runner.py), as `gpuemu ci` "
      "does");
}

}  // namespace gpuemu::python
