// The C++ Rng, bound so tests can check gpuemu.rng (pure Python) against it draw for draw.
#include "register.hpp"

#include "gpuemu/engine/rng.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace gpuemu::python {

void register_rng(py::module_& m) {
  m.def(
      "splitmix64_next",
      [](std::uint64_t state) {
        const std::uint64_t out = splitmix64_next(state);
        return std::make_pair(state, out);
      },
      py::arg("state"), "one splitmix64 step: (new_state, output)");
  m.def(
      "derive_seed",
      [](std::uint64_t parent, const std::string& domain) { return derive_seed(parent, domain); },
      py::arg("parent"), py::arg("domain"),
      "the seed of the sub-stream named `domain` (UTF-8 bytes) under `parent`");
  m.def("det_log", &det_log, py::arg("x"), "gpuemu's machine-independent natural log (x > 0)");

  py::class_<Rng>(m, "Rng", "gpuemu::Rng: xorshift128+ seeded through splitmix64")
      .def(py::init<std::uint64_t>(), py::arg("seed"))
      .def_static(
          "substream",
          [](std::uint64_t parent, const std::string& domain) {
            return Rng::substream(parent, domain);
          },
          py::arg("parent"), py::arg("domain"))
      .def("next_u64", &Rng::next_u64)
      .def("uniform01", &Rng::uniform01)
      .def("uniform", &Rng::uniform, py::arg("lo"), py::arg("hi"))
      .def("bounded", &Rng::bounded, py::arg("n"))
      .def("integer", &Rng::integer, py::arg("lo"), py::arg("hi"))
      .def("normal", &Rng::normal)
      .def("chance", &Rng::chance, py::arg("num"), py::arg("den"))
      .def(
          "weighted",
          [](Rng& r, const std::vector<std::uint64_t>& w) {
            if (w.empty()) throw py::value_error("weighted() needs at least one weight");
            return r.weighted(w);
          },
          py::arg("weights"))
      .def(
          "u64s",
          [](Rng& r, py::ssize_t count) {
            py::array_t<std::uint64_t> out(count);
            auto* p = out.mutable_data();
            for (py::ssize_t i = 0; i < count; ++i) p[i] = r.next_u64();
            return out;
          },
          py::arg("count"), "`count` raw draws as a uint64 array")
      .def(
          "uniform01s",
          [](Rng& r, py::ssize_t count) {
            py::array_t<double> out(count);
            auto* p = out.mutable_data();
            for (py::ssize_t i = 0; i < count; ++i) p[i] = r.uniform01();
            return out;
          },
          py::arg("count"), "`count` uniform01 draws as a float64 array")
      .def(
          "normals",
          [](Rng& r, py::ssize_t count) {
            py::array_t<double> out(count);
            auto* p = out.mutable_data();
            for (py::ssize_t i = 0; i < count; ++i) p[i] = r.normal();
            return out;
          },
          py::arg("count"), "`count` normal draws as a float64 array");
}

}  // namespace gpuemu::python
