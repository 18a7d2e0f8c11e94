// gpuemu._core: a private module. Import `gpuemu` instead; python/gpuemu/_core.pyi lists what is
// here.
#include "register.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "gpuemu's compiled core (private: use the `gpuemu` package)";
  m.attr("__version__") = GPUEMU_VERSION;

  gpuemu::python::register_errors(m);
  gpuemu::python::register_dtypes(m);
  gpuemu::python::register_rng(m);
  gpuemu::python::register_reference(m);
  gpuemu::python::register_engine(m);
  gpuemu::python::register_client(m);
}
