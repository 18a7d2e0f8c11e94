// gpuemu._core: a private module. Import `gpuemu` instead; python/gpuemu/_core.pyi lists what is
// here.
#include "register.hpp"

#include "gpuemu/engine/install_paths.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "gpuemu's compiled core (private: use the `gpuemu` package)";
  m.attr("__version__") = GPUEMU_VERSION;
  m.def("builtin_schema_dir", &gpuemu::builtin_schema_dir,
        "The built-in schema directory this module loads (the wheel's share/gpuemu/schemas, or the "
        "source tree's schemas/)");

  gpuemu::python::register_errors(m);
  gpuemu::python::register_dtypes(m);
  gpuemu::python::register_rng(m);
  gpuemu::python::register_reference(m);
  gpuemu::python::register_engine(m);
  gpuemu::python::register_client(m);
  gpuemu::python::register_project(m);
}
