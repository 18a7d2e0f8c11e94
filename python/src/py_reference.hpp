// Engine.with_op's engine (py_reference.cpp): the base engine's catalogue and envelopes plus one op
// whose reference is a Python callable.
#pragma once

#include "gpuemu/engine/engine.hpp"

#include <pybind11/pybind11.h>

#include <string>

namespace gpuemu::python {

// `schema_text` (an op schema document, parsed as the catalogue's are; `file` names it in errors),
// its reference `reference(inputs, attrs, dims, dtype)`, and its envelope in every dtype when
// `envelope` is not None. A catalogue op's name is a conflict.
Engine engine_with_op(const Engine& base, const std::string& schema_text, const std::string& file,
                      pybind11::function reference, pybind11::object envelope);

}  // namespace gpuemu::python
