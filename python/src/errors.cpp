// gpuemu errors cross into Python as the exception classes of gpuemu/errors.py (pure Python, so
// the later client code can raise them too): GpuemuException's ErrorCode picks the class through
// gpuemu.errors.error_from_code.
#include "register.hpp"

#include "gpuemu/base/error.hpp"

#include <string>

namespace py = pybind11;

namespace gpuemu::python {
namespace {

void set_python_error(const Error& error) {
  const std::string code(error_code_name(error.code));
  try {
    py::object errors = py::module_::import("gpuemu.errors");
    py::object exc = errors.attr("error_from_code")(code, error.message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& e) {
    // gpuemu.errors itself failed to import: still say what went wrong.
    PyErr_SetString(PyExc_RuntimeError, (code + ": " + error.message).c_str());
  }
}

}  // namespace

void register_errors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const GpuemuException& e) {
      set_python_error(e.error());
    }
  });
  // Raises the exception a C++ error with this code becomes (tests and the facade use it).
  m.def(
      "_raise_error",
      [](const std::string& code, const std::string& message) {
        for (ErrorCode ec : k_all_error_codes) {
          if (error_code_name(ec) == code) throw GpuemuException(make_error(ec, message));
        }
        throw GpuemuException(make_error(ErrorCode::internal, "unknown error code '" + code + "'"));
      },
      py::arg("code"), py::arg("message"));
  // Every error code, in the enum's order (the names the wire protocol uses too).
  py::list codes;
  for (ErrorCode c : k_all_error_codes)
    codes.append(py::str(std::string(error_code_name(c))));
  m.attr("error_codes") = py::tuple(codes);
}

}  // namespace gpuemu::python
