// Dtype conversions over numpy arrays (float64 -> the bits of a format, bits -> float64, and
// rounding), and the static facts of each dtype. The loops run without the GIL.
#include "convert.hpp"
#include "register.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

namespace py = pybind11;

namespace gpuemu::python {
namespace {

using F64Array = py::array_t<double, py::array::c_style | py::array::forcecast>;

std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

DType floating_dtype(const std::string& name, const char* fn) {
  const DType d = dtype_from_name(name);
  if (!is_floating(d))
    throw_error(ErrorCode::invalid_argument,
                std::string(fn) + " needs a floating dtype, not " + std::string(dtype_name(d)));
  return d;
}

// float64 values -> the dtype's bits as unsigned integers of its width (uint8 ... uint64).
template <typename Bits>
py::array encode_as(const F64Array& values, DType dtype, Overflow overflow) {
  py::array_t<Bits> out(shape_of(values));
  const double* src = values.data();
  Bits* dst = out.mutable_data();
  const auto n = values.size();
  {
    py::gil_scoped_release release;
    for (py::ssize_t i = 0; i < n; ++i) {
      std::byte buf[sizeof(Bits)];
      encode_element(dtype, src[i], buf, overflow);
      std::memcpy(&dst[i], buf, sizeof(Bits));  // little-endian storage == host order here
    }
  }
  return out;
}

py::array to_bits(const F64Array& values, const std::string& dtype_name_,
                  const std::string& overflow) {
  const DType d = floating_dtype(dtype_name_, "to_bits");
  const Overflow o = overflow_from_name(overflow);
  switch (dtype_size(d)) {
    case 1:
      return encode_as<std::uint8_t>(values, d, o);
    case 2:
      return encode_as<std::uint16_t>(values, d, o);
    case 4:
      return encode_as<std::uint32_t>(values, d, o);
    default:
      return encode_as<std::uint64_t>(values, d, o);
  }
}

template <typename Bits>
py::array decode_as(const py::array& bits_in, DType dtype) {
  auto bits = py::array_t<Bits, py::array::c_style | py::array::forcecast>::ensure(bits_in);
  if (!bits) throw py::error_already_set();
  py::array_t<double> out(shape_of(bits));
  const Bits* src = bits.data();
  double* dst = out.mutable_data();
  const auto n = bits.size();
  {
    py::gil_scoped_release release;
    for (py::ssize_t i = 0; i < n; ++i) {
      std::byte buf[sizeof(Bits)];
      std::memcpy(buf, &src[i], sizeof(Bits));
      dst[i] = decode_element(dtype, buf);
    }
  }
  return out;
}

py::array from_bits(const py::array& bits, const std::string& dtype_name_) {
  const DType d = floating_dtype(dtype_name_, "from_bits");
  const char kind = bits.dtype().kind();
  if ((kind != 'u' && kind != 'i') || static_cast<std::size_t>(bits.itemsize()) != dtype_size(d))
    throw_error(ErrorCode::invalid_argument,
                "from_bits(" + std::string(dtype_name(d)) + ") needs an integer array of " +
                    std::to_string(dtype_size(d)) + "-byte items, not " +
                    py::str(bits.dtype()).cast<std::string>());
  // Signed items are reinterpreted as unsigned (numpy's cast wraps modulo 2^bits: torch's
  // bfloat16 seen as int16 gives the same bits), byte order converted if needed.
  switch (dtype_size(d)) {
    case 1:
      return decode_as<std::uint8_t>(bits, d);
    case 2:
      return decode_as<std::uint16_t>(bits, d);
    case 4:
      return decode_as<std::uint32_t>(bits, d);
    default:
      return decode_as<std::uint64_t>(bits, d);
  }
}

py::array round_to_array(const F64Array& values, const std::string& name,
                         const std::string& overflow) {
  const DType d = dtype_from_name(name);
  const Overflow o = overflow_from_name(overflow);
  py::array_t<double> out(shape_of(values));
  const double* src = values.data();
  double* dst = out.mutable_data();
  const auto n = values.size();
  {
    py::gil_scoped_release release;
    for (py::ssize_t i = 0; i < n; ++i) dst[i] = round_to(d, src[i], o);
  }
  return out;
}

py::dict info_dict(DType d) {
  const DTypeInfo& i = dtype_info(d);
  py::dict out;
  out["name"] = std::string(i.name);
  out["size"] = i.size;
  out["is_floating"] = i.is_floating;
  out["mantissa_bits"] = i.mantissa_bits;
  out["unit_roundoff"] = i.unit_roundoff;
  out["max_finite"] = i.max_finite;
  out["lowest"] = i.lowest;
  out["min_normal"] = i.min_normal;
  out["min_subnormal"] = i.min_subnormal;
  return out;
}

// Whether two buffers hold the same bytes: both C-contiguous and of one length, compared with one
// memcmp (False for a non-contiguous buffer: the caller then sends it for the daemon's exact check).
bool same_bytes(const py::buffer& a, const py::buffer& b) {
  const py::buffer_info x = a.request(), y = b.request();
  auto contiguous = [](const py::buffer_info& i) {
    py::ssize_t step = i.itemsize;
    for (py::ssize_t d = i.ndim - 1; d >= 0; --d) {
      if (i.shape[d] != 1 && i.strides[d] != step) return false;
      step *= i.shape[d];
    }
    return true;
  };
  if (!contiguous(x) || !contiguous(y)) return false;
  const auto nx = static_cast<std::size_t>(x.size * x.itemsize);
  const auto ny = static_cast<std::size_t>(y.size * y.itemsize);
  if (nx != ny) return false;
  if (nx == 0) return true;
  py::gil_scoped_release unlocked;
  return std::memcmp(x.ptr, y.ptr, nx) == 0;
}

}  // namespace

void register_dtypes(py::module_& m) {
  m.def("same_bytes", &same_bytes, py::arg("a"), py::arg("b"),
        "whether two C-contiguous buffers hold the same bytes (False when either is not contiguous)");
  m.def(
      "to_bits", &to_bits, py::arg("values"), py::arg("dtype"), py::arg("overflow") = "to_nan",
      "float64 values rounded to a floating dtype (nearest, ties to even), as its bits: uint8 for "
      "fp8, uint16 for float16/bfloat16, uint32 for float32, uint64 for float64");
  m.def("from_bits", &from_bits, py::arg("bits"), py::arg("dtype"),
        "the float64 values of a floating dtype's bits (an integer array of its width)");
  m.def("round_to", &round_to_array, py::arg("values"), py::arg("dtype"),
        py::arg("overflow") = "to_nan",
        "float64 values rounded to any dtype, returned as float64 (the values it would hold)");
  m.def(
      "dtype_info", [](const std::string& name) { return info_dict(dtype_from_name(name)); },
      py::arg("dtype"), "static facts of a dtype, as a dict");
  m.def(
      "dtype_names",
      [] {
        std::vector<std::string> names;
        for (DType d : all_dtypes()) names.emplace_back(dtype_name(d));
        return names;
      },
      "every dtype's canonical name");
  m.def(
      "canonical_dtype",
      [](const std::string& name) { return std::string(dtype_name(dtype_from_name(name))); },
      py::arg("dtype"), "the canonical name of a dtype name or alias ('bf16' -> 'bfloat16')");
}

}  // namespace gpuemu::python
