#include "convert.hpp"

#include "gpuemu/engine/strided.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace py = pybind11;

namespace gpuemu::python {

void throw_error(ErrorCode code, std::string message) {
  throw GpuemuException(make_error(code, std::move(message)));
}

DType dtype_from_name(const std::string& name) {
  if (auto d = parse_dtype(name)) return *d;
  std::string known;
  for (DType d : all_dtypes()) known += (known.empty() ? "" : ", ") + std::string(dtype_name(d));
  throw_error(ErrorCode::invalid_argument, "unknown dtype '" + name + "' (known: " + known + ")");
}

Overflow overflow_from_name(const std::string& name) {
  if (name == "to_nan") return Overflow::to_nan;
  if (name == "saturate") return Overflow::saturate;
  throw_error(ErrorCode::invalid_argument,
              "overflow must be 'to_nan' or 'saturate', not '" + name + "'");
}

namespace {

// The array with whole-element strides (a view into a record array is copied contiguously first),
// after checking that its items are `dtype`'s size.
py::array element_strided(const py::array& array_in, DType dtype, const std::string& what) {
  const auto itemsize = static_cast<std::int64_t>(array_in.itemsize());
  const auto esize = static_cast<std::int64_t>(dtype_size(dtype));
  if (itemsize != esize)
    throw_error(ErrorCode::invalid_argument, what + ": a " + std::string(dtype_name(dtype)) +
                                                 " tensor needs " + std::to_string(esize) +
                                                 "-byte items, the array has " +
                                                 std::to_string(itemsize) + "-byte items");
  for (py::ssize_t d = 0; d < array_in.ndim(); ++d)
    if (array_in.strides(d) % itemsize != 0) return py::array::ensure(array_in, py::array::c_style);
  return array_in;
}

}  // namespace

Tensor tensor_from_array(const py::array& array_in, DType dtype, const std::string& what) {
  const py::array array = element_strided(array_in, dtype, what);
  const auto itemsize = static_cast<std::int64_t>(array.itemsize());
  const auto ndim = static_cast<std::size_t>(array.ndim());
  Shape shape(ndim);
  std::vector<std::int64_t> strides(ndim);
  std::int64_t lo = 0, hi = 0, numel = 1;  // byte offsets reachable from data()
  for (std::size_t d = 0; d < ndim; ++d) {
    shape[d] = static_cast<std::int64_t>(array.shape(static_cast<py::ssize_t>(d)));
    const auto stride = static_cast<std::int64_t>(array.strides(static_cast<py::ssize_t>(d)));
    strides[d] = stride / itemsize;
    numel *= shape[d];
    if (shape[d] > 0) (stride < 0 ? lo : hi) += stride * (shape[d] - 1);
  }
  if (numel == 0) return Tensor::zeros(dtype, shape);
  const auto bytes = static_cast<std::size_t>(hi - lo + itemsize);
  auto storage = std::make_shared<std::vector<std::byte>>(bytes);
  const auto* base = static_cast<const std::byte*>(array.data());
  std::memcpy(storage->data(), base + lo, bytes);
  auto t =
      Tensor::view(dtype, std::move(shape), std::move(strides), -lo / itemsize, std::move(storage));
  if (!t) throw GpuemuException(t.error());
  return std::move(t).value();
}

RefArg ref_arg_from_array(const py::array& array_in, DType dtype, const std::string& what) {
  const py::array array = element_strided(array_in, dtype, what);
  const auto itemsize = static_cast<std::int64_t>(array.itemsize());
  const auto ndim = static_cast<std::size_t>(array.ndim());
  RefArg arg;
  arg.dtype = dtype;
  arg.shape.resize(ndim);
  std::vector<std::int64_t> strides(ndim);
  for (std::size_t d = 0; d < ndim; ++d) {
    arg.shape[d] = static_cast<std::int64_t>(array.shape(static_cast<py::ssize_t>(d)));
    strides[d] = static_cast<std::int64_t>(array.strides(static_cast<py::ssize_t>(d))) / itemsize;
  }
  arg.data = exact_values_of(dtype, static_cast<const std::byte*>(array.data()), arg.shape, strides);
  return arg;
}

Json json_from_py(py::handle value, const std::string& what) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) {
    try {
      return value.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      throw_error(
          ErrorCode::invalid_argument,
          what + ": integer " + py::str(value).cast<std::string>() + " does not fit in int64");
    }
  }
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    Json out = Json::array();
    std::size_t i = 0;
    for (py::handle item : value)
      out.push_back(json_from_py(item, what + "[" + std::to_string(i++) + "]"));
    return out;
  }
  if (py::isinstance<py::dict>(value)) {
    Json out = Json::object();
    for (auto [k, v] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k))
        throw_error(ErrorCode::invalid_argument, what + ": dict keys must be strings");
      const auto key = k.cast<std::string>();
      out[key] = json_from_py(v, what + "." + key);
    }
    return out;
  }
  // numpy scalars (np.float32(0.5), np.int64(3), np.bool_(True)) and 0-d arrays.
  if (py::hasattr(value, "item") && py::hasattr(value, "dtype") && py::hasattr(value, "ndim") &&
      value.attr("ndim").cast<int>() == 0)
    return json_from_py(value.attr("item")(), what);
  throw_error(ErrorCode::invalid_argument,
              what + ": unsupported value of type " +
                  py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>() +
                  " (use None, bool, int, float, str or a list of those)");
}

py::object py_from_json(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return py::none();
    case Json::value_t::boolean:
      return py::bool_(value.get<bool>());
    case Json::value_t::number_integer:
      return py::int_(value.get<std::int64_t>());
    case Json::value_t::number_unsigned:
      return py::int_(value.get<std::uint64_t>());
    case Json::value_t::number_float:
      return py::float_(value.get<double>());
    case Json::value_t::string:
      return py::str(value.get<std::string>());
    case Json::value_t::array: {
      py::list out;
      for (const auto& v : value) out.append(py_from_json(v));
      return out;
    }
    case Json::value_t::object: {
      py::dict out;
      for (const auto& [k, v] : value.items()) out[py::str(k)] = py_from_json(v);
      return out;
    }
    default:
      return py::none();
  }
}

}  // namespace gpuemu::python
