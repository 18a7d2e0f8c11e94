// Conversions between Python objects and gpuemu values, shared by the binding files.
#pragma once

#include "gpuemu/engine/dtype.hpp"
#include "gpuemu/base/error.hpp"
#include "gpuemu/engine/op.hpp"
#include "gpuemu/engine/op_schema.hpp"
#include "gpuemu/engine/tensor.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

namespace gpuemu::python {

// Throws a GpuemuException, which errors.cpp turns into the matching gpuemu.errors exception.
[[noreturn]] void throw_error(ErrorCode code, std::string message);

// A dtype by name or alias ("bfloat16", "bf16", ...); invalid_argument when unknown.
DType dtype_from_name(const std::string& name);
// "to_nan" or "saturate".
Overflow overflow_from_name(const std::string& name);

// A tensor holding a copy of the array's elements with the array's own layout: same shape, the
// array's strides (in elements), and an element offset, over a storage that spans exactly the
// bytes the array can reach (negative and zero strides included). The array's items are the
// dtype's storage (float16 values, or the uint16/uint8 bits of bfloat16 and fp8), so its item size
// must equal the dtype's.
Tensor tensor_from_array(const pybind11::array& array, DType dtype, const std::string& what);
// The array's elements as their exact values (no intermediate copy of its bytes), for the
// reference oracle: the same checks as tensor_from_array.
RefArg ref_arg_from_array(const pybind11::array& array, DType dtype, const std::string& what);

// Attribute values: None, bool, int, float, str, lists/tuples and dicts of those, numpy scalars.
Json json_from_py(pybind11::handle value, const std::string& what);
pybind11::object py_from_json(const Json& value);

}  // namespace gpuemu::python
